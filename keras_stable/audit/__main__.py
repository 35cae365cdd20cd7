"""`python -m keras_stable.audit MODEL.keras --data BATCH.npz`: see `cli`."""

import sys

from keras_stable.audit.cli import main

if __name__ == "__main__":
    sys.exit(main())
