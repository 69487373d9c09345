import sys

from trnsim.conformance.command import main

sys.exit(main())
