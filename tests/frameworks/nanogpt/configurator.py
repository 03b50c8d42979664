# nanoGPT's "poor man's configurator": `python train.py --key=value` overrides a global of train.py
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    assert arg.startswith("--"), arg
    key, val = arg.split("=")
    key = key[2:]
    assert key in globals(), f"unknown config key {key}"
    try:
        val = literal_eval(val)
    except (SyntaxError, ValueError):
        pass
    globals()[key] = val
