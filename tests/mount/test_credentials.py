"""Real mounts of a bucket on s3rver (127.0.0.1) whose credentials come from
the AWS chain's remote links, each played by a fake on loopback: the EC2
instance metadata service (IMDSv2, credentials near their expiry renewed by
the running mount), the container endpoint (ECS, EKS Pod Identity), a
credential_process in the config file, STS's AssumeRoleWithWebIdentity
(EKS service accounts), a profile that assumes a role (STS AssumeRole) and
one signed in through IAM Identity Center (`aws sso login`'s cached token,
refreshed at SSO-OIDC, exchanged at the SSO portal). No AWS_* keys and no
credentials file in the daemon's environment. A link configured but failing,
and no credentials anywhere, fail the mount with a message that says why.
s3rver does not check signatures: that requests are signed with what the
links gave is backend unit tests' work (backends/s3_fake_server_test.cc)."""

import sys
sys.dont_write_bytecode = True  # keep tests/mount free of __pycache__

import datetime
import hashlib
import http.server
import json
import threading
import time
import urllib.parse

import harness

BUCKET = "igt-creds"


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Fake:
    """A loopback HTTP server answering the credential endpoints; records
    (method, path, headers, body) of every request."""

    def __init__(self):
        self.requests: list[tuple[str, str, dict, str]] = []
        # s3rver knows one key (harness.S3_ACCESS_KEY) and refuses others:
        # a mount that reads its files signed with what the fake handed out.
        self.key = harness.S3_ACCESS_KEY
        self.token = "first"
        self.fetches = 0
        self.after_first: tuple[str, float] | None = None  # (token, expiry) from the second fetch on
        self.expires = time.time() + 3600
        self.sts_error: str | None = None
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, status: int, body: str, ctype: str = "text/plain"):
                b = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def creds(self) -> str:
                fake.fetches += 1
                if fake.after_first and fake.fetches > 1:
                    fake.token, fake.expires = fake.after_first
                return json.dumps({"Code": "Success", "AccessKeyId": fake.key, "SecretAccessKey": fake.key,
                                   "Token": "t-" + fake.token, "Expiration": iso(fake.expires)})

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n).decode() if n else ""
                fake.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                if self.command == "PUT" and self.path == "/latest/api/token":
                    return self.reply(200, "TOKEN-1")
                if self.path == "/latest/meta-data/iam/security-credentials/":
                    if self.headers.get("X-aws-ec2-metadata-token") != "TOKEN-1":
                        return self.reply(401, "")
                    return self.reply(200, "training-role")
                if self.path == "/latest/meta-data/iam/security-credentials/training-role":
                    return self.reply(200, self.creds(), "application/json")
                if self.path == "/v2/credentials/pod":
                    if self.headers.get("Authorization") != "pod-secret-token":
                        return self.reply(401, '{"message":"bad token"}')
                    return self.reply(200, self.creds(), "application/json")
                if self.path.startswith("/federation/credentials?"):  # SSO GetRoleCredentials
                    if self.headers.get("x-amz-sso_bearer_token") != "sso-access-2":
                        return self.reply(401, '{"message":"Session token not found or invalid"}')
                    fake.fetches += 1
                    return self.reply(200, json.dumps({"roleCredentials": {
                        "accessKeyId": fake.key, "secretAccessKey": fake.key, "sessionToken": "t-sso",
                        "expiration": int(fake.expires * 1000)}}), "application/json")
                if self.command == "POST" and self.path == "/token":  # SSO-OIDC CreateToken
                    form = json.loads(body)
                    if form.get("grantType") != "refresh_token" or form.get("refreshToken") != "sso-refresh-1":
                        return self.reply(400, '{"error":"invalid_grant"}')
                    return self.reply(200, json.dumps({"accessToken": "sso-access-2", "expiresIn": 28800,
                                                       "refreshToken": "sso-refresh-2"}), "application/json")
                if self.command == "POST" and self.path == "/":
                    if fake.sts_error:
                        return self.reply(400, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>"
                                          f"{fake.sts_error}</Message></Error></ErrorResponse>", "text/xml")
                    return self.reply(200, "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
                                      f"<Credentials><AccessKeyId>{fake.key}</AccessKeyId><SecretAccessKey>{fake.key}"
                                      f"</SecretAccessKey><SessionToken>t-{fake.token}</SessionToken><Expiration>"
                                      f"{iso(fake.expires)}"
                                      "</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
                                      "</AssumeRoleWithWebIdentityResponse>", "text/xml")
                return self.reply(404, "")

            do_GET = do_PUT = do_POST = handle_any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def creds_fetches(self) -> int:
        return sum(1 for r in self.requests
                   if r[1] in ("/latest/meta-data/iam/security-credentials/training-role", "/v2/credentials/pod")
                   or r[0] == "POST")


def bare_env(s: harness.Session, extra: dict) -> dict:
    """The daemon's environment with no AWS keys and no credentials file."""
    env = s.igt_env()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
              "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
              "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_SERVICE_ENDPOINT",
              "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL_SSO",
              "AWS_ENDPOINT_URL_SSO_OIDC",
              "AWS_CONFIG_FILE"):
        env.pop(k, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"  # the fakes are on loopback
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(s.tmp / "no-credentials-file")
    env["AWS_CONFIG_FILE"] = str(s.tmp / "no-config-file")
    env["AWS_EC2_METADATA_DISABLED"] = "true"  # never 169.254.169.254 from a test
    env.update(extra)
    return env


def main():
    with harness.Session("credentials") as s:
        srv = s.start_s3rver(buckets=(BUCKET,))
        src = s.mkdir("src")
        (src / "a.bin").write_bytes(b"a" * 300_000)
        (src / "b.bin").write_bytes(b"b" * 200_000)
        srv.upload_tree(BUCKET, src)
        args = ["--endpoint", srv.endpoint, "--region", "us-east-1", "--log-level", "info"]
        fake = Fake()
        try:
            # -- 1. instance metadata (IMDSv2); credentials 200 s from their
            # expiry are renewed at once by the mount's renewer thread: the
            # second fetch hands out new ones, good for an hour.
            fake.token, fake.expires = "first", time.time() + 200
            fake.after_first = ("renewed", time.time() + 3600)
            m = s.mount(f"s3://{BUCKET}", args=args, env=bare_env(s, {
                "AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": fake.url}))
            harness.check(m.path("a.bin").read_bytes() == b"a" * 300_000, "instance metadata: a.bin read")
            harness.check(fake.requests[0][0] == "PUT" and fake.requests[0][1] == "/latest/api/token"
                          and fake.requests[0][2].get("x-aws-ec2-metadata-token-ttl-seconds") == "21600",
                          "IMDSv2: a session token first")
            # The mount renews them in the background: wait for it (bounded).
            deadline = time.monotonic() + 30
            while fake.creds_fetches() < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            harness.check(fake.creds_fetches() == 2,
                          f"credentials 200 s from expiry renewed once, in the background "
                          f"({fake.creds_fetches()} fetches)")
            harness.check(m.path("b.bin").read_bytes() == b"b" * 200_000, "b.bin read after the renewal")
            harness.check(fake.creds_fetches() == 2, "renewed ones (an hour left) are not fetched again")
            st = s.stats(m)
            harness.check(abs(st.get("credentials_expiry_unix_s", 0) - fake.expires) <= 1
                          and st.get("credentials_renew_failures") == 0,
                          f"stats show the renewed ones' expiry ({st.get('credentials_expiry_unix_s')} against "
                          f"{fake.expires:.0f}) and no failed renewal")
            s.unmount(m)
            log = m.proc.stderr_text()
            harness.check("credentials from instance metadata (role training-role)" in log
                          and "credentials from instance metadata (role training-role) renewed; they expire in" in log,
                          "the log names the source and the renewal")
            fake.after_first = None
            harness.check("t-first" not in log and "t-renewed" not in log and "TOKEN-1" not in log,
                          "no session or metadata token in the log")

            # -- 2. container credentials with an authorization token.
            fake.requests.clear()
            m = s.mount(f"s3://{BUCKET}", args=args, env=bare_env(s, {
                "AWS_CONTAINER_CREDENTIALS_FULL_URI": fake.url + "/v2/credentials/pod",
                "AWS_CONTAINER_AUTHORIZATION_TOKEN": "pod-secret-token"}))
            harness.check(m.path("b.bin").read_bytes() == b"b" * 200_000, "container credentials: b.bin read")
            harness.check(fake.creds_fetches() == 1 and fake.requests[0][2].get("authorization") == "pod-secret-token",
                          "the container endpoint was asked once, with the token")
            s.unmount(m)
            # A daemon (no -f): its log file says where the credentials came from.
            m = s.mount(f"s3://{BUCKET}", args=args, foreground=False, env=bare_env(s, {
                "AWS_CONTAINER_CREDENTIALS_FULL_URI": fake.url + "/v2/credentials/pod",
                "AWS_CONTAINER_AUTHORIZATION_TOKEN": "pod-secret-token"}))
            harness.check(m.path("b.bin").read_bytes() == b"b" * 200_000, "daemon: b.bin read")
            s.unmount(m)
            daemon_log = (m.cache_dir / "igtcache.log").read_text()
            harness.check("s3: credentials from container credentials at" in daemon_log
                          and "pod-secret-token" not in daemon_log,
                          "the daemon's log file names the source, not the token")

            # -- 2a. the endpoint from $AWS_ENDPOINT_URL_S3 (over
            # $AWS_ENDPOINT_URL), then from the profile's endpoint_url, as
            # the AWS CLI takes them (only $AWS_ENDPOINT_URL was read: a
            # tester's AWS_ENDPOINT_URL_S3 for a local store went to AWS);
            # the credentials file named with a leading ~ and with $HOME
            # (no shell expands a systemd Environment= line), its token under
            # the older name aws_security_token.
            home = s.mkdir("home-ep")
            (home / "creds").write_text(f"[default]\naws_access_key_id = {harness.S3_ACCESS_KEY}\n"
                                        f"aws_secret_access_key = {harness.S3_SECRET_KEY}\n"
                                        "aws_security_token = legacy-token\n")
            no_endpoint = ["--region", "us-east-1", "--log-level", "info"]
            m = s.mount(f"s3://{BUCKET}", args=no_endpoint, env=bare_env(s, {
                "HOME": str(home), "AWS_SHARED_CREDENTIALS_FILE": "~/creds",
                "AWS_ENDPOINT_URL_S3": srv.endpoint, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}))
            harness.check(m.path("a.bin").read_bytes() == b"a" * 300_000, "endpoint from $AWS_ENDPOINT_URL_S3: a.bin read")
            s.unmount(m)
            err = m.proc.stderr_text()
            harness.check(f"endpoint {srv.endpoint} (from $AWS_ENDPOINT_URL_S3)" in err, "the log names the variable")
            harness.check(f"credentials from profile [default] of {home}/creds" in err,
                          "the credentials file ~/creds is read under $HOME")
            config = s.write_config("aws-config-ep", f"[default]\nendpoint_url = {srv.endpoint}\nregion = us-east-1\n")
            # A daemon (no -f) too: the paths were made absolute before they
            # were expanded (./~/creds), and its log file says the endpoint.
            m = s.mount(f"s3://{BUCKET}", args=["--log-level", "info"], foreground=False, env=bare_env(s, {
                "HOME": str(home), "AWS_SHARED_CREDENTIALS_FILE": "~/creds", "AWS_CONFIG_FILE": str(config)}))
            harness.check(m.path("a.bin").read_bytes() == b"a" * 300_000, "daemon: ~/creds and the profile's endpoint")
            s.unmount(m)
            daemon_log = (m.cache_dir / "igtcache.log").read_text()
            harness.check(f"(from endpoint_url of profile [default] in {config})" in daemon_log,
                          "the daemon's log file names the endpoint's source")
            m = s.mount(f"s3://{BUCKET}", args=["--log-level", "info"], env=bare_env(s, {
                "HOME": str(home), "AWS_SHARED_CREDENTIALS_FILE": "$HOME/creds", "AWS_CONFIG_FILE": str(config)}))
            harness.check(m.path("b.bin").read_bytes() == b"b" * 200_000, "endpoint from the profile: b.bin read")
            s.unmount(m)
            harness.check(f"(from endpoint_url of profile [default] in {config})" in m.proc.stderr_text(),
                          "the log names the profile's endpoint_url")

            # -- 2b. a credential_process in the config file (the bridge to SSO:
            # `aws configure export-credentials --format process`).
            helper = s.tmp / "helper.sh"
            helper.write_text("#!/bin/sh\necho ran >> " + str(s.tmp / "helper.runs") + "\n"
                              "printf '{\"Version\": 1, \"AccessKeyId\": \"%s\", \"SecretAccessKey\": \"%s\", "
                              "\"SessionToken\": \"proc\"}' " + f"{harness.S3_ACCESS_KEY} {harness.S3_SECRET_KEY}\n")
            helper.chmod(0o755)
            config = s.write_config("aws-config", f"[default]\ncredential_process = {helper}\n")
            m = s.mount(f"s3://{BUCKET}", args=args, env=bare_env(s, {"AWS_CONFIG_FILE": str(config)}))
            harness.check(m.path("a.bin").read_bytes() == b"a" * 300_000, "credential_process: a.bin read")
            harness.check((s.tmp / "helper.runs").read_text().count("ran") == 1, "the helper ran once")
            s.unmount(m)
            harness.check("credentials from credential_process of profile [default]" in m.proc.stderr_text(),
                          "the log names the helper's profile")

            # -- 3. web identity exchanged at STS.
            fake.requests.clear()
            token = s.tmp / "sa-token"
            token.write_text("eyJ.header.payload\n")
            web = {"AWS_WEB_IDENTITY_TOKEN_FILE": str(token), "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/reader",
                   "AWS_ENDPOINT_URL_STS": fake.url}
            m = s.mount(f"s3://{BUCKET}", args=args, env=bare_env(s, web))
            harness.check(m.path("a.bin").read_bytes() == b"a" * 300_000, "web identity: a.bin read")
            form = urllib.parse.parse_qs(fake.requests[0][3])
            harness.check(form.get("Action") == ["AssumeRoleWithWebIdentity"]
                          and form.get("RoleArn") == ["arn:aws:iam::123456789012:role/reader"]
                          and form.get("WebIdentityToken") == ["eyJ.header.payload"],
                          f"STS got the role and the token: {sorted(form)}")
            s.unmount(m)

            # -- 3b. a profile that assumes a role from a source profile's keys.
            fake.requests.clear()
            creds = s.write_config("aws-credentials", "[base]\naws_access_key_id = AKIDBASE\n"
                                   "aws_secret_access_key = base-secret\n")
            config = s.write_config("aws-config-role", "[profile trainer]\nrole_arn = arn:aws:iam::1:role/trainer\n"
                                    "source_profile = base\n")
            m = s.mount(f"s3://{BUCKET}", args=args + ["--profile", "trainer"], env=bare_env(s, {
                "AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_CONFIG_FILE": str(config),
                "AWS_ENDPOINT_URL_STS": fake.url}))
            harness.check(m.path("b.bin").read_bytes() == b"b" * 200_000, "assumed role: b.bin read")
            form = urllib.parse.parse_qs(fake.requests[0][3])
            harness.check(form.get("Action") == ["AssumeRole"] and "Credential=AKIDBASE/"
                          in fake.requests[0][2].get("authorization", ""),
                          "STS AssumeRole, signed with the source profile's key")
            s.unmount(m)

            # -- 3c. a profile signed in through IAM Identity Center: the token
            # `aws sso login` cached, 5 minutes from its expiry, is refreshed
            # at SSO-OIDC (the cache file rewritten) and exchanged for the
            # role's credentials.
            fake.requests.clear()
            home = s.mkdir("home")
            cache = home / ".aws" / "sso" / "cache"
            cache.mkdir(parents=True)
            token_file = cache / (hashlib.sha1(b"corp").hexdigest() + ".json")
            token_file.write_text(json.dumps({
                "startUrl": "https://example.awsapps.com/start", "region": "eu-west-1",
                "accessToken": "sso-access-1", "expiresAt": iso(time.time() + 300),
                "refreshToken": "sso-refresh-1", "clientId": "client-1", "clientSecret": "client-secret-1",
                "registrationExpiresAt": iso(time.time() + 86400)}))
            config = s.write_config("aws-config-sso", "[profile dev]\nsso_session = corp\n"
                                    "sso_account_id = 111122223333\nsso_role_name = Reader\n"
                                    "[sso-session corp]\nsso_start_url = https://example.awsapps.com/start\n"
                                    "sso_region = eu-west-1\n")
            m = s.mount(f"s3://{BUCKET}", args=args + ["--profile", "dev"], env=bare_env(s, {
                "HOME": str(home), "AWS_CONFIG_FILE": str(config),
                "AWS_ENDPOINT_URL_SSO": fake.url, "AWS_ENDPOINT_URL_SSO_OIDC": fake.url}))
            harness.check(m.path("a.bin").read_bytes() == b"a" * 300_000, "SSO: a.bin read")
            harness.check([r[1].split("?")[0] for r in fake.requests] == ["/token", "/federation/credentials"],
                          f"the token refreshed, then exchanged: {[r[1] for r in fake.requests]}")
            harness.check("account_id=111122223333&role_name=Reader" in fake.requests[1][1],
                          "GetRoleCredentials of the profile's account and role")
            saved = json.loads(token_file.read_text())
            harness.check(saved["accessToken"] == "sso-access-2" and saved["refreshToken"] == "sso-refresh-2"
                          and saved["clientId"] == "client-1",
                          "the refreshed token is saved where aws sso login keeps it")
            s.unmount(m)
            log = m.proc.stderr_text()
            harness.check("credentials from SSO role Reader in account 111122223333 (profile [dev]" in log
                          and "sso-access" not in log and "sso-refresh" not in log,
                          "the log names the SSO role, not the tokens")

            # -- 4. configured but refused: the mount fails, saying why; a key
            # S3 does not know fails it too (s3rver checks the key id).
            fake.key = "ASIAUNKNOWN"
            try:
                s.mount(f"s3://{BUCKET}", args=args, env=bare_env(s, web))
                harness.check(False, "a mount signing with a key S3 does not know must fail")
            except harness.MountError as e:
                harness.check("InvalidAccessKeyId" in e.stderr, f"the unknown key is refused: {e.stderr[-200:]!r}")
            fake.key = harness.S3_ACCESS_KEY
            fake.sts_error = "Token is expired"
            try:
                s.mount(f"s3://{BUCKET}", args=args, env=bare_env(s, web))
                harness.check(False, "a mount whose web identity STS refuses must fail")
            except harness.MountError as e:
                harness.check(e.returncode not in (None, 0) and "InvalidIdentityToken: Token is expired" in e.stderr,
                              f"STS's refusal is the mount's error: {e.stderr.strip()[-300:]!r}")
                harness.check("payload" not in e.stderr, "the token is not in the message")

            # -- 5. nothing anywhere: every link named.
            try:
                s.mount(f"s3://{BUCKET}", args=args, env=bare_env(s, {}))
                harness.check(False, "a mount without credentials must fail")
            except harness.MountError as e:
                harness.check(e.returncode not in (None, 0) and "no AWS credentials" in e.stderr
                              and "no-credentials-file" in e.stderr and "AWS_EC2_METADATA_DISABLED" in e.stderr
                              and "no_sign_request" in e.stderr,
                              f"the error names where it looked: {e.stderr.strip()[-400:]!r}")
        finally:
            fake.close()


if __name__ == "__main__":
    harness.run_test("test_credentials", main)
