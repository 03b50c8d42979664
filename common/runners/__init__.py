"""The parent processes: they plan, launch the recipe scripts as children, repeat rounds and collect
results; they import no torch and never the harness (the children run it)."""
from common import startup

startup.check_torch("cookbook")  # every runner's first line, before it plans or writes anything
