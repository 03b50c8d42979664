"""Telco Customer Churn: loading, a synthetic stand-in in the real schema, and the seed's encoding.

The real file is Kaggle's blastchar/telco-customer-churn WA_Fn-UseC_-Telco-Customer-Churn.csv:
7,043 rows, 21 columns, about 26.5% churn, blank TotalCharges where tenure is 0.

pandas and scikit-learn are imported where they are used: a load whose arrays are cached needs
neither, and they are about a second and a half of every churn process's start otherwise.
"""
from __future__ import annotations

import hashlib
import io
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from common import env
from common.errors import CookbookError
from common.files import atomic_write_bytes, atomic_write_text
from common.workloads import datasource

if TYPE_CHECKING:
    import pandas as pd

KAGGLE_DATASET = "blastchar/telco-customer-churn"
CSV_NAME = "WA_Fn-UseC_-Telco-Customer-Churn.csv"
ROWS, CHURN_ROWS, TENURE0_ROWS = 7043, 1869, 11  # the real file's counts

COLUMNS = [
    "customerID", "gender", "SeniorCitizen", "Partner", "Dependents", "tenure", "PhoneService",
    "MultipleLines", "InternetService", "OnlineSecurity", "OnlineBackup", "DeviceProtection",
    "TechSupport", "StreamingTV", "StreamingMovies", "Contract", "PaperlessBilling", "PaymentMethod",
    "MonthlyCharges", "TotalCharges", "Churn",
]
# the seed's list, in the seed's order (the order fixes the feature order)
CATEGORICAL = [
    "gender", "Partner", "Dependents", "PhoneService", "MultipleLines", "InternetService",
    "OnlineSecurity", "OnlineBackup", "DeviceProtection", "TechSupport", "StreamingTV",
    "StreamingMovies", "Contract", "PaperlessBilling", "PaymentMethod",
]
INTERNET_ADDONS = CATEGORICAL[6:12]
PAYMENT = ["Electronic check", "Mailed check", "Bank transfer (automatic)", "Credit card (automatic)"]
CONTRACT = ["Month-to-month", "One year", "Two year"]


def synthetic_frame(seed: int = 0) -> pd.DataFrame:
    """7,043 customers with the real columns, value sets and rough marginals; churn depends on
    contract, tenure, fibre and payment method so a model has something to learn."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    n = ROWS
    yes_no = lambda p: np.where(rng.random(n) < p, "Yes", "No")  # noqa: E731
    tenure = rng.integers(1, 73, n)
    tenure[rng.choice(n, TENURE0_ROWS, replace=False)] = 0
    phone = yes_no(0.90)
    internet = rng.choice(["DSL", "Fiber optic", "No"], n, p=[0.34, 0.44, 0.22])
    contract = rng.choice(CONTRACT, n, p=[0.55, 0.21, 0.24])
    payment = rng.choice(PAYMENT, n, p=[0.34, 0.23, 0.22, 0.21])
    df = pd.DataFrame({
        "customerID": [f"{rng.integers(1000, 10000)}-{''.join(rng.choice(list('ABCDEFGHIJKLMNOPQRSTUVWXYZ'), 5))}"
                       for _ in range(n)],
        "gender": rng.choice(["Female", "Male"], n),
        "SeniorCitizen": (rng.random(n) < 0.16).astype(int),
        "Partner": yes_no(0.48),
        "Dependents": yes_no(0.30),
        "tenure": tenure,
        "PhoneService": phone,
        "MultipleLines": np.where(phone == "No", "No phone service", yes_no(0.42)),
        "InternetService": internet,
    })
    for col in INTERNET_ADDONS:
        df[col] = np.where(internet == "No", "No internet service", yes_no(0.40))
    df["Contract"] = contract
    df["PaperlessBilling"] = yes_no(0.59)
    df["PaymentMethod"] = payment
    base = np.select([internet == "Fiber optic", internet == "DSL"], [70.0, 45.0], 20.0)
    monthly = np.clip(base + rng.normal(0, 15, n), 18.25, 118.75).round(2)
    df["MonthlyCharges"] = monthly
    total = (monthly * tenure * rng.uniform(0.95, 1.05, n)).round(2)
    df["TotalCharges"] = np.where(tenure == 0, " ", total.astype(str))  # the real file's blanks
    logit = (1.4 * (contract == "Month-to-month") - 0.035 * tenure + 0.8 * (internet == "Fiber optic")
             + 0.5 * (payment == "Electronic check") + 0.3 * df["SeniorCitizen"].to_numpy())
    # exactly the real file's number of churners: the top CHURN_ROWS of logit + Gumbel noise
    score = logit + rng.gumbel(size=n)
    churn = np.zeros(n, dtype=bool)
    churn[np.argsort(-score)[:CHURN_ROWS]] = True
    df["Churn"] = np.where(churn, "Yes", "No")
    return df[COLUMNS]


def _synthetic_csv() -> Path:
    path = env.data_dir() / "telco-synthetic" / CSV_NAME
    if not path.exists():
        atomic_write_text(path, synthetic_frame().to_csv(index=False))
    return path


def _kaggle_csv() -> Path:
    import kagglehub  # optional at import time

    folder = datasource.call_with_timeout(lambda: kagglehub.dataset_download(KAGGLE_DATASET), 60)
    return Path(folder) / CSV_NAME


def locate(data_arg: str | None) -> tuple[Path, datasource.DataSource]:
    """The CSV to read and a record of its source."""
    if data_arg == "synthetic":
        return _synthetic_csv(), datasource.source("synthetic", None, "synthetic Telco-schema CSV (not real data)")
    if data_arg:
        return Path(data_arg), datasource.source("local", str(data_arg))
    if chosen := datasource.decided("telco"):  # the parent probed once: no child asks the network again
        return Path(chosen[0]), chosen[1]
    reason = "offline mode"
    if not datasource.offline() and not datasource.reachable("https://www.kaggle.com"):
        reason = "kaggle.com unreachable"
    elif not datasource.offline():
        try:
            path = _kaggle_csv()
            if path.exists():
                return path, datasource.source("real", f"kaggle:{KAGGLE_DATASET}")
            reason = "download has no " + CSV_NAME
        except Exception as e:  # only the exception type: messages may carry account details
            reason = f"kagglehub unavailable ({type(e).__name__})"
    return _synthetic_csv(), datasource.source(
        "synthetic", None, f"synthetic Telco-schema CSV (not real data); {reason}")


def read_csv(path: Path) -> pd.DataFrame:
    """Read and check a Telco CSV; any problem is one clear line."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise CookbookError(f"--data {path}: no such file; give the Telco churn CSV ({CSV_NAME})")
    try:
        with open(path, "rb") as f:
            if b"\x00" in f.read(4096):  # pandas would take binary junk for a header line
                raise CookbookError(f"--data {path}: not a readable CSV (binary content); give the Telco churn CSV")
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise CookbookError(f"--data {path}: the file is empty; give the Telco churn CSV") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as e:
        raise CookbookError(f"--data {path}: not a readable CSV ({type(e).__name__}); "
                            "give the Telco churn CSV") from None
    if df.empty:
        raise CookbookError(f"--data {path}: the CSV has no rows")
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise CookbookError(f"--data {path}: not the Telco churn table, missing columns: {', '.join(missing)}")
    return df


def encode(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The seed's preprocessing: coerce TotalCharges (blank -> median), label-encode binary columns
    and MultipleLines, one-hot the other multi-class columns, map Churn to 0/1. 38 features."""
    import pandas as pd

    df = df.copy()
    df["TotalCharges"] = pd.to_numeric(df["TotalCharges"], errors="coerce")
    df["TotalCharges"] = df["TotalCharges"].fillna(df["TotalCharges"].median())
    for col in CATEGORICAL:
        values = df[col]
        if values.nunique() == 2 or (values.nunique() == 3 and "No phone service" in values.values):
            # LabelEncoder's rule: codes follow the sorted class names
            df[col] = pd.Categorical(values, categories=sorted(values.unique())).codes
        else:
            dummies = pd.get_dummies(values, prefix=col)
            df = pd.concat([df.drop(columns=col), dummies], axis=1)
    churn = df["Churn"].map({"Yes": 1, "No": 0})
    if churn.isna().any():
        raise CookbookError("the Churn column must hold only 'Yes' and 'No'")
    df = df.drop(columns=["customerID", "Churn"])
    return df.to_numpy(dtype=np.float32), churn.to_numpy(dtype=np.float32), list(df.columns)


def load(data_arg: str | None, seed: int = 42):
    """Train/test arrays, standardized on the train split (80/20, random_state=42 as in the seed).
    Cached per CSV content, seed, this module and the libraries that compute them (_cache_path)."""
    path, src = locate(data_arg)
    cache = _cache_path(path, seed) if Path(path).is_file() else None  # else read_csv says why, in one line
    if cache is not None and cache.is_file():
        try:
            with np.load(cache) as found:
                arrays = tuple(found[k] for k in SPLITS)
                src.rows, src.features = int(found["rows"]), int(found["features"])
                src.churn_rate = float(found["churn"])
            return (*arrays, src)
        except (OSError, ValueError, KeyError):  # a file not ours: computed anew below
            pass
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y, features = encode(read_csv(path))
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=seed)
    scaler = StandardScaler().fit(X_train)
    src.rows, src.features, src.churn_rate = len(X), len(features), round(float(y.mean()), 4)
    arrays = (scaler.transform(X_train).astype(np.float32), scaler.transform(X_test).astype(np.float32),
              y_train, y_test)
    buf = io.BytesIO()
    np.savez(buf, **dict(zip(SPLITS, arrays)), rows=src.rows, features=src.features, churn=src.churn_rate)
    atomic_write_bytes(cache, buf.getvalue())  # whole or not at all: ranks and twins load at once
    return (*arrays, src)


SPLITS = ("X_train", "X_test", "y_train", "y_test")


def test_rows(data_arg: str | None) -> list[list[float]]:
    """The standardized test split as plain rows: the customers a load generator sends."""
    return load(data_arg)[1].tolist()


def _cache_path(csv: Path, seed: int) -> Path:
    """The cached arrays' file: a digest of the CSV's bytes, the seed, this module's code and the
    versions of numpy, pandas and scikit-learn, so that a change to any of them computes them anew."""
    digest = hashlib.sha256(Path(csv).read_bytes())
    digest.update(Path(__file__).read_bytes())
    digest.update(f"{seed}|{'|'.join(metadata.version(m) for m in ('numpy', 'pandas', 'scikit-learn'))}".encode())
    return env.data_dir() / "telco-arrays" / f"{digest.hexdigest()[:24]}.npz"
