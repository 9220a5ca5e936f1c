import sys

from torchlet.cli import main

sys.exit(main())
