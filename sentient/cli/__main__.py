"""`python -m sentient.cli`: the same as the `sentient` command."""

import sys

from sentient.cli import main

if __name__ == "__main__":
    sys.exit(main())
