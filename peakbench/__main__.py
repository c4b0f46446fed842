import sys

from peakbench.cli import main

sys.exit(main())
