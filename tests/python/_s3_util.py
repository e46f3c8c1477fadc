"""An S3-compatible test store: path-style GET/HEAD of /BUCKET/KEY with Range, ETag and
Last-Modified, that checks AWS Signature Version 4 the way S3 does (canonical request, string to
sign, signing key from the secret, date and region; x-amz-content-sha256 and
x-amz-security-token when present) and answers 403 with S3's error codes when a request is
unsigned on a private bucket or signed wrongly.  It stands in for S3 in the tests, where no S3
is reachable; the signature algorithm is AWS's published one, implemented here independently of
libcurl's, so a request it accepts is one S3 would."""
import datetime
import email.utils
import hashlib
import hmac
import os
import threading
import urllib.parse

from _remote_util import http_server

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def signing_key(secret, date, region, service):
    k = _hmac(("AWS4" + secret).encode(), date)
    k = _hmac(k, region)
    k = _hmac(k, service)
    return _hmac(k, "aws4_request")


def _uri_encode(s, keep_slash):
    return urllib.parse.quote(s, safe="/-_.~" if keep_slash else "-_.~")


def canonical_request(method, raw_path, headers, signed, payload_hash):
    path, _, query = raw_path.partition("?")
    # S3 does not normalise or double-encode the path: encode each segment once
    canon_uri = _uri_encode(urllib.parse.unquote(path), True) or "/"
    pairs = sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
    canon_query = "&".join(f"{_uri_encode(k, False)}={_uri_encode(v, False)}" for k, v in pairs)
    canon_headers = "".join(f"{h}:{' '.join(headers.get(h, '').split())}\n" for h in signed)
    return "\n".join([method, canon_uri, canon_query, canon_headers, ";".join(signed), payload_hash])


class S3Server:
    """buckets: {name: {"public": bool}}; files live in root/BUCKET/KEY.
    keys: {access key id: (secret, session token or None)}.
    self.log: one dict per request: method, path, auth ('none', 'ok' or the S3 error code),
    range, region and service of the credential scope."""

    def __init__(self, root, buckets, keys):
        self.root, self.buckets, self.keys = str(root), buckets, keys
        self.log = []
        self.lock = threading.Lock()
        self.httpd, self.port = http_server(lambda h: self._serve(h, body=True),
                                            lambda h: self._serve(h, body=False))
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- signature ------------------------------------------------------------------------
    def _check_auth(self, h):
        """'none', 'ok', or an S3 error code; and the scope's (region, service)."""
        auth = h.headers.get("Authorization")
        if not auth:
            return "none", None
        algo, _, rest = auth.partition(" ")
        if algo != "AWS4-HMAC-SHA256":
            return "InvalidRequest", None
        fields = {}
        for part in rest.split(","):
            k, _, v = part.strip().partition("=")
            fields[k] = v
        try:
            akid, date, region, service, term = fields["Credential"].split("/")
            signed = fields["SignedHeaders"].split(";")
            got = fields["Signature"]
        except (KeyError, ValueError):
            return "AuthorizationHeaderMalformed", None
        scope = (region, service)
        if term != "aws4_request" or akid not in self.keys:
            return "InvalidAccessKeyId", scope
        secret, token = self.keys[akid]
        headers = {k.lower(): v for k, v in h.headers.items()}
        amz_date = headers.get("x-amz-date", "")
        if "host" not in signed or "x-amz-date" not in signed or not amz_date.startswith(date):
            return "AuthorizationHeaderMalformed", scope
        try:
            t = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            return "AuthorizationHeaderMalformed", scope
        if abs((datetime.datetime.now(datetime.timezone.utc) - t).total_seconds()) > 900:
            return "RequestTimeTooSkewed", scope
        if token is not None and (headers.get("x-amz-security-token") != token
                                  or "x-amz-security-token" not in signed):
            return "InvalidToken", scope
        payload = headers.get("x-amz-content-sha256", EMPTY_SHA256)
        if payload not in (EMPTY_SHA256, "UNSIGNED-PAYLOAD"):
            return "XAmzContentSHA256Mismatch", scope
        creq = canonical_request(h.command, h.path, headers, signed, payload)
        sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, f"{date}/{region}/{service}/aws4_request",
                         hashlib.sha256(creq.encode()).hexdigest()])
        want = hmac.new(signing_key(secret, date, region, service), sts.encode(), hashlib.sha256).hexdigest()
        return ("ok" if hmac.compare_digest(want, got) else "SignatureDoesNotMatch"), scope

    # --- serving --------------------------------------------------------------------------
    MESSAGES = {"AccessDenied": "Access Denied",
                "SignatureDoesNotMatch": "The request signature we calculated does not match the "
                                         "signature you provided. Check your key and signing method.",
                "InvalidAccessKeyId": "The AWS Access Key Id you provided does not exist in our records.",
                "InvalidToken": "The provided token is malformed or otherwise invalid.",
                "NoSuchKey": "The specified key does not exist.",
                "NoSuchBucket": "The specified bucket does not exist"}

    def _error(self, h, status, code, body):
        xml = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>"
               f"<Message>{self.MESSAGES.get(code, code)}</Message></Error>\n").encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/xml")
        h.send_header("Content-Length", str(len(xml)))
        h.end_headers()
        if body:
            h.wfile.write(xml)

    def _serve(self, h, body):
        auth, scope = self._check_auth(h)
        path = urllib.parse.unquote(h.path.split("?")[0]).lstrip("/")
        bucket, _, key = path.partition("/")
        with self.lock:
            self.log.append({"method": h.command, "path": "/" + path, "auth": auth,
                             "range": h.headers.get("Range"), "scope": scope})
        if bucket not in self.buckets:
            return self._error(h, 404, "NoSuchBucket", body)
        if auth == "none" and not self.buckets[bucket].get("public"):
            return self._error(h, 403, "AccessDenied", body)
        if auth not in ("none", "ok"):
            return self._error(h, 403, auth, body)
        fn = os.path.join(self.root, bucket, key)
        if not key or not os.path.isfile(fn):
            return self._error(h, 404, "NoSuchKey", body)
        with open(fn, "rb") as f:
            data = f.read()
        etag = '"%s"' % hashlib.md5(data).hexdigest()
        lm = email.utils.formatdate(os.path.getmtime(fn), usegmt=True)
        start, end, status = 0, len(data) - 1, 200
        rng = h.headers.get("Range", "")
        if rng.startswith("bytes="):
            a, b = rng[6:].split("-")
            start, end, status = int(a), min(int(b), len(data) - 1), 206
        part = data[start:end + 1]
        h.send_response(status)
        h.send_header("ETag", etag)
        h.send_header("Last-Modified", lm)
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(len(part)))
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        h.end_headers()
        if body:
            h.wfile.write(part)
