"""`python -m envbuild.validator` and the zipapp's entry point."""

import sys

from envbuild.validator.supervisor import main

if __name__ == "__main__":
    sys.exit(main())
