"""`python -m keras_stable.demo`: runs the demo's command line."""

import sys

from keras_stable.demo.cli import main

if __name__ == "__main__":
    sys.exit(main())
