"""Tiny Shakespeare (about 1.1 MB of plain text, karpathy/char-rnn), read as characters: a token is a
character, so nothing (no tokenizer) is downloaded at run time beyond the text itself.

Where the text comes from, in order: a path given (--data gpt=FILE.txt), the real file when its host
answers (cached under the data folder), else a synthetic stand-in written as the same kind of plain
text file (lines of a play: a speaker's name, then verse) and recorded as synthetic in every result."""
import urllib.request
from pathlib import Path

import numpy as np

from common import env
from common.errors import CookbookError
from common.files import atomic_write_bytes, atomic_write_text
from common.workloads import datasource

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
NAME = "input.txt"
CHARS, VOCABULARY = 1_115_394, 65  # the real file's characters and distinct ones (nanoGPT's prepare.py says so)
MIN_CHARS = 10_000  # a text shorter than this is no corpus to train on
SPEAKERS = ("FIRST CITIZEN", "MENENIUS", "CORIOLANUS", "VOLUMNIA", "JULIET", "ROMEO", "KING RICHARD", "GLOUCESTER")
WORDS = ("the", "and", "my", "lord", "thou", "thee", "good", "love", "what", "shall", "come", "heart", "now",
         "king", "death", "night", "speak", "hath", "noble", "sweet", "fair", "blood", "life", "well", "grace",
         "tongue", "honour", "father", "brother", "world", "heaven", "hand", "eyes", "soul", "friends", "rome")


def synthetic_text(seed: int = 0, chars: int = 300_000) -> str:
    """Lines of a play in the real file's form (a speaker's name and a colon, verse, a blank line), from a
    small vocabulary: a model can learn it, and nobody mistakes it for Shakespeare."""
    rng = np.random.default_rng(seed)
    out, size = [], 0
    while size < chars:
        lines = [SPEAKERS[rng.integers(len(SPEAKERS))] + ":"]
        for _ in range(rng.integers(1, 5)):
            words = [WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(4, 10))]
            lines.append(" ".join(words).capitalize() + (",", ".", "!", "?")[rng.integers(4)])
        block = "\n".join(lines) + "\n\n"
        out.append(block)
        size += len(block)
    return "".join(out)


def _synthetic_file() -> Path:
    path = env.data_dir() / "shakespeare-synthetic" / NAME
    if not path.exists():
        atomic_write_text(path, synthetic_text())
    return path


def _download() -> Path:
    path = env.data_dir() / "shakespeare" / NAME
    if not path.exists():
        data = datasource.call_with_timeout(lambda: urllib.request.urlopen(URL, timeout=30).read(), 60)
        text = data.decode("utf-8")
        if (len(text), len(set(text))) != (CHARS, VOCABULARY):
            raise ValueError("the downloaded file is not the known Tiny Shakespeare")
        atomic_write_bytes(path, data)
    return path


def locate(data_arg: str | None) -> tuple[Path, datasource.DataSource]:
    """The text file to read and a record of its source."""
    if data_arg == "synthetic":
        return _synthetic_file(), datasource.source("synthetic", None, "synthetic play text (not Shakespeare)")
    if data_arg:
        return Path(data_arg), datasource.source("local", str(data_arg))
    if chosen := datasource.decided("shakespeare"):  # the parent probed once: no child asks the network again
        return Path(chosen[0]), chosen[1]
    reason = "offline mode"
    if not datasource.offline() and not datasource.reachable(URL):
        reason = "raw.githubusercontent.com unreachable"
    elif not datasource.offline():
        try:
            return _download(), datasource.source("real", URL)
        except Exception as e:  # a failed download falls back, said in the source record
            reason = f"download failed ({type(e).__name__})"
    return _synthetic_file(), datasource.source("synthetic", None, f"synthetic play text (not Shakespeare); {reason}")


def check(path) -> str:
    """The text of a given file, checked: one line says what is wrong with it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CookbookError(f"--data gpt={path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CookbookError(f"--data gpt={path}: not a UTF-8 text file ({type(e).__name__})") from None
    if len(text) < MIN_CHARS:
        raise CookbookError(f"--data gpt={path}: {len(text):,} characters, fewer than the {MIN_CHARS:,} a corpus needs")
    return text


def load(data_arg: str | None):
    """(tokens: int64 character ids of the whole text, vocabulary: its characters in order, source record)."""
    path, src = locate(data_arg)
    text = check(path)
    vocabulary = sorted(set(text))
    lookup = {c: i for i, c in enumerate(vocabulary)}
    tokens = np.fromiter((lookup[c] for c in text), dtype=np.int64, count=len(text))
    src.rows, src.features = len(tokens), len(vocabulary)  # characters, and the vocabulary's size
    return tokens, vocabulary, src
