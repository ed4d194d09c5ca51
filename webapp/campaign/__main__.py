"""`python -m webapp.campaign ...`: see webapp/campaign/cli.py."""

import sys

from webapp.campaign.cli import main

sys.exit(main())
