import numpy as np
import pandas as pd
import pytest

from common.errors import CookbookError
from common.workloads import telco


@pytest.fixture(scope="module")
def synthetic_csv():
    path, src = telco.locate("synthetic")
    assert src.synthetic and "not real data" in src.note
    return path


def test_synthetic_csv_has_the_real_schema(synthetic_csv):
    df = pd.read_csv(synthetic_csv, keep_default_na=False)
    assert list(df.columns) == telco.COLUMNS and len(df) == 7043
    assert (df["Churn"] == "Yes").mean() == pytest.approx(0.265, abs=0.002)
    blanks = df["TotalCharges"].astype(str).str.strip() == ""
    assert blanks.sum() == 11 and (df.loc[blanks, "tenure"] == 0).all()
    assert set(df["MultipleLines"]) == {"Yes", "No", "No phone service"}
    assert set(df["PaymentMethod"]) == set(telco.PAYMENT)


def test_seed_encoding_gives_38_features(synthetic_csv):
    X, y, features = telco.encode(telco.read_csv(synthetic_csv))
    assert X.shape == (7043, 38) and not np.isnan(X).any()
    assert set(np.unique(y)) == {0.0, 1.0}
    # binary columns and MultipleLines label-encoded in place; the other multi-class columns one-hot
    assert "MultipleLines" in features and "Contract" not in features
    assert "Contract_Two year" in features and "PaymentMethod_Electronic check" in features


def test_load_splits_80_20_and_standardizes():
    X_train, X_test, y_train, y_test, src = telco.load("synthetic")
    assert X_train.shape == (5634, 38) and X_test.shape == (1409, 38)
    assert np.abs(X_train.mean(axis=0)).max() < 1e-4
    assert src.rows == 7043 and src.features == 38 and src.kind == "synthetic"


def test_a_cached_load_is_the_computed_one_bit_for_bit_and_needs_neither_pandas_nor_sklearn(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv("COOKBOOK_DATA_DIR", str(tmp_path))
    computed = telco.load("synthetic")
    (cache,) = (tmp_path / "telco-arrays").glob("*.npz")
    cached = telco.load("synthetic")
    for a, b in zip(computed[:4], cached[:4]):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert cached[4] == computed[4]  # rows, features and churn rate too
    probe = ("import sys; from common.workloads import telco; telco.load('synthetic'); "
             "print(sorted(m for m in ('pandas', 'sklearn', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    cache.write_bytes(b"not an npz")  # a damaged cache is computed anew, not trusted
    again = telco.load("synthetic")
    assert np.array_equal(again[0], computed[0]) and np.load(cache)["X_train"].shape == (5634, 38)
    assert telco.load("synthetic", seed=1)[0].shape == (5634, 38)  # another seed, another file
    assert len(list((tmp_path / "telco-arrays").glob("*.npz"))) == 2


def test_a_local_copy_is_recorded_as_local(synthetic_csv, tmp_path):
    copy = tmp_path / "telco.csv"
    copy.write_bytes(synthetic_csv.read_bytes())
    *_, src = telco.load(str(copy))
    assert src.kind == "local" and src.location == str(copy)


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    (b"", "empty"),
    (b"\x00\xff\xfe binary \x00 junk", "not a readable CSV"),
    (b"customerID,gender\n1,Male\n", "missing columns: SeniorCitizen, Partner"),
])
def test_bad_csv_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(CookbookError, match=message):
        telco.read_csv(path)
