import sys

from steer.cli.main import main

sys.exit(main())
