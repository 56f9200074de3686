import sys

from bloomperf.cli import main

sys.exit(main())
