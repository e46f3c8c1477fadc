"""s3://bucket/key through the dchttp VFS against an S3-compatible store on 127.0.0.1
(_s3_util.S3Server) that checks every request's SigV4 signature as S3 does: signed reads of a
private bucket give the local file's answers, anonymous reads of a public bucket too, and a
wrong secret, a wrong session token, missing credentials or a missing key fail at once with
the URL and the HTTP status, never a wrong answer."""
import os
import shutil
import sqlite3
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import gen  # noqa: E402
from _s3_util import S3Server, canonical_request, signing_key  # noqa: E402
from _remote_util import reset_vfs_counters  # noqa: E402

import deltacells  # noqa: E402

AK, SK = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TK_AK, TK_SK, TOKEN = "ASIATEMPEXAMPLE", "tempsecret/example+key", "FwoGZXIvYXdzEXAMPLETOKEN=="
ENV = ("DC_S3_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
       "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "DC_CACHE_DIR")
QUERIES = [
    "SELECT count(*) FROM cells",
    "SELECT * FROM cells ORDER BY cell_id",
    "SELECT cell_type, count(*), avg(n_counts) FROM cells GROUP BY cell_type ORDER BY 1",
    "SELECT * FROM genes ORDER BY gene_id",
    "SELECT * FROM tiles ORDER BY 1",
]
NO_SHARE = {"shared": 0}   # out of the process's shared block cache: every open reads the store


@pytest.fixture(autouse=True)
def env():
    """Each test sets the AWS variables it needs; the process's own are put back after."""
    saved = {k: os.environ.pop(k, None) for k in ENV}
    yield os.environ
    for k, v in saved.items():
        os.environ.pop(k, None)
        if v is not None:
            os.environ[k] = v


@pytest.fixture(scope="module", autouse=True)
def reset_counters(store):
    """The VFS's counters are the process's: zero before this file's tests (which check that signed
    reads had no errors; test_remote.py's faults, run before them in one process, left 23), and
    zero again afterwards (the refused opens here count as errors, and other test files check
    them)."""
    reset_vfs_counters(store["local"])
    yield
    reset_vfs_counters(store["local"])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("s3")
    small = gen(d, 2000, 150, 11, 400)[1]
    for b in ("private-bucket", "public-bucket"):
        (d / "root" / b / "atlas").mkdir(parents=True)
        shutil.copy(small, d / "root" / b / "atlas" / "small.dcdb")
    s = S3Server(d / "root", {"private-bucket": {"public": False}, "public-bucket": {"public": True}},
                 {AK: (SK, None), TK_AK: (TK_SK, TOKEN)})
    yield {"server": s, "local": small}
    s.stop()


def _signed(env, store, region="eu-west-3", ak=AK, sk=SK, token=None):
    env["DC_S3_ENDPOINT"] = store["server"].endpoint
    env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env["AWS_REGION"] = ak, sk, region
    if token is not None:
        env["AWS_SESSION_TOKEN"] = token


def _same_answers(remote, local_path):
    local = deltacells.connect(local_path)
    try:
        for q in QUERIES:
            assert remote.execute(q).fetchall() == local.execute(q).fetchall(), q
    finally:
        local.close()


def test_the_verifier_accepts_aws_published_example():
    """The store's SigV4 code against the worked example AWS publishes for S3 (GET of a range of
    /test.txt in examplebucket, 2013-05-24): same canonical request hash and signature, so the
    store judges signatures as S3 does."""
    headers = {"host": "examplebucket.s3.amazonaws.com", "range": "bytes=0-9",
               "x-amz-content-sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
               "x-amz-date": "20130524T000000Z"}
    signed = ["host", "range", "x-amz-content-sha256", "x-amz-date"]
    creq = canonical_request("GET", "/test.txt", headers, signed, headers["x-amz-content-sha256"])
    import hashlib
    import hmac
    assert hashlib.sha256(creq.encode()).hexdigest() == \
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
    sts = "\n".join(["AWS4-HMAC-SHA256", "20130524T000000Z", "20130524/us-east-1/s3/aws4_request",
                     hashlib.sha256(creq.encode()).hexdigest()])
    sig = hmac.new(signing_key("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524", "us-east-1", "s3"), sts.encode(), hashlib.sha256).hexdigest()
    assert sig == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"


def test_signed_reads_of_a_private_bucket_equal_local(env, store):
    _signed(env, store)
    s = store["server"]
    n0 = len(s.log)
    con = deltacells.connect("s3://private-bucket/atlas/small.dcdb", remote=NO_SHARE)
    try:
        _same_answers(con, store["local"])
        st = deltacells.vfs_stats(con)
        assert st["errors"] == 0
    finally:
        con.close()
    log = s.log[n0:]
    assert log and all(r["auth"] == "ok" for r in log), log[:3]
    assert all(r["path"] == "/private-bucket/atlas/small.dcdb" for r in log)
    assert all(r["scope"] == ("eu-west-3", "s3") for r in log)      # AWS_REGION is the scope's region
    assert any(r["range"] for r in log)                               # range reads, signed with the range


def test_dc_batch_signed_equals_local(env, store):
    _signed(env, store, region="us-east-1")
    import numpy as np
    ids = np.arange(0, 2000, 7, dtype=np.int64).tobytes()
    q = "SELECT * FROM dc_batch(?)"
    con = deltacells.connect("s3://private-bucket/atlas/small.dcdb", remote=NO_SHARE)
    local = deltacells.connect(store["local"])
    try:
        assert con.execute(q, (ids,)).fetchall() == local.execute(q, (ids,)).fetchall()
    finally:
        con.close()
        local.close()


def _count_cells(store):
    """Opens the private dataset, counts its cells; the store's log of those requests."""
    s = store["server"]
    n0 = len(s.log)
    con = deltacells.connect("s3://private-bucket/atlas/small.dcdb", remote=NO_SHARE)
    try:
        assert con.execute("SELECT count(*) FROM cells").fetchone() == (2000,)
    finally:
        con.close()
    assert len(s.log) > n0
    return s.log[n0:]


def test_session_token_is_sent_and_signed(env, store):
    _signed(env, store, ak=TK_AK, sk=TK_SK, token=TOKEN)
    assert all(r["auth"] == "ok" for r in _count_cells(store))


def test_wrong_session_token_is_refused(env, store):
    _signed(env, store, ak=TK_AK, sk=TK_SK, token="not-the-token")
    with pytest.raises(sqlite3.OperationalError) as e:
        deltacells.connect("s3://private-bucket/atlas/small.dcdb", remote=NO_SHARE)
    assert "HTTP 403" in str(e.value) and "private-bucket/atlas/small.dcdb" in str(e.value)
    assert "InvalidToken" in str(e.value)
    assert store["server"].log[-1]["auth"] == "InvalidToken"


def test_wrong_secret_is_a_clear_403(env, store):
    _signed(env, store, sk="not-the-secret")
    with pytest.raises(sqlite3.OperationalError) as e:
        deltacells.connect("s3://private-bucket/atlas/small.dcdb", remote=NO_SHARE)
    msg = str(e.value)
    assert "HTTP 403" in msg and "s3://private-bucket/atlas/small.dcdb" in msg, msg
    assert "SignatureDoesNotMatch" in msg, msg          # S3's own code, from the error body
    assert store["server"].log[-1]["auth"] == "SignatureDoesNotMatch"


def test_no_credentials_private_bucket_403_public_bucket_reads(env, store):
    env["DC_S3_ENDPOINT"] = store["server"].endpoint
    with pytest.raises(sqlite3.OperationalError) as e:
        deltacells.connect("s3://private-bucket/atlas/small.dcdb", remote=NO_SHARE)
    assert "HTTP 403" in str(e.value)
    assert store["server"].log[-1]["auth"] == "none"
    s = store["server"]
    n0 = len(s.log)
    con = deltacells.connect("s3://public-bucket/atlas/small.dcdb", remote=NO_SHARE)
    try:
        _same_answers(con, store["local"])
    finally:
        con.close()
    assert s.log[n0:] and all(r["auth"] == "none" for r in s.log[n0:])   # anonymous: nothing signed


def test_aws_endpoint_url_is_used_too(env, store):
    env["AWS_ENDPOINT_URL"] = store["server"].endpoint + "/"       # a trailing slash is fine
    env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = AK, SK
    env["AWS_DEFAULT_REGION"] = "ap-south-1"
    assert all(r["auth"] == "ok" and r["scope"] == ("ap-south-1", "s3") for r in _count_cells(store))


def test_missing_key_and_bad_names(env, store):
    _signed(env, store)
    with pytest.raises(sqlite3.OperationalError) as e:
        deltacells.connect("s3://private-bucket/atlas/nope.dcdb", remote=NO_SHARE)
    assert "HTTP 404" in str(e.value) and "nope.dcdb" in str(e.value)
    for bad in ("s3://", "s3://bucket-only", "s3:///key"):
        with pytest.raises(sqlite3.OperationalError) as e:
            deltacells.connect(bad, remote=NO_SHARE)
        assert "s3://BUCKET/KEY" in str(e.value), (bad, str(e.value))
    # a URL that is not one (a raw space) fails at once, saying so, not after backing off 5 times
    import time
    t = time.monotonic()
    with pytest.raises(sqlite3.OperationalError) as e:
        deltacells.connect(store["server"].endpoint + "/public-bucket/at las.dcdb", remote=NO_SHARE)
    assert "percent-encoded" in str(e.value) and "after 1 attempt)" in str(e.value), str(e.value)
    assert time.monotonic() - t < 1.0


@pytest.mark.parametrize("key", ["plus+x (1).dcdb", "eq=a;b*c.dcdb", "pct%41 \u00fcn\u00ef.dcdb"])
def test_keys_are_s3_keys_as_they_are(env, store, key):
    """s3://bucket/KEY names the key as S3 and aws-cli name it: a key with '+', '=', '(', ';',
    '*', a space, '%' or non-ASCII letters failed with SignatureDoesNotMatch (it looked like a
    credentials problem), 'pct%41' read the key 'pctA'.  The key is percent-encoded as SigV4
    encodes it."""
    _signed(env, store)
    from pathlib import Path
    d = Path(store["server"].root) / "private-bucket" / "keys"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(store["local"], d / key)
    con = deltacells.connect(f"s3://private-bucket/keys/{key}", remote=NO_SHARE)
    try:
        _same_answers(con, store["local"])
    finally:
        con.close()


def test_a_version_confirmed_with_credentials_is_not_taken_without_them(env, store):
    """An open takes a version this process confirmed moments ago without a request
    (test_remote_known.py), but only one confirmed with the same credential: an anonymous open
    of the private bucket after a signed one still asks the store, and gets its 403."""
    _signed(env, store)
    s = store["server"]
    url = "s3://private-bucket/atlas/small.dcdb"
    con = deltacells.connect(url)                       # shared cache: the version is recorded
    try:
        assert con.execute("SELECT count(*) FROM cells").fetchone() == (2000,)
        n0 = len(s.log)
        again = deltacells.connect(url)                 # signed again: taken, no request
        again.close()
        assert len(s.log) == n0
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            del env[k]
        with pytest.raises(sqlite3.OperationalError) as e:
            deltacells.connect(url)
        assert "HTTP 403" in str(e.value)
        assert len(s.log) == n0 + 1 and s.log[-1]["auth"] == "none"
    finally:
        con.close()
