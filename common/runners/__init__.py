"""The parent processes: they plan, launch the recipe scripts as children, repeat rounds and collect
results; they import no torch and never the harness (the children run it)."""
