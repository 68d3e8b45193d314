"""A certificate authority, a server certificate for 127.0.0.1 and a client certificate, made by
the openssl command for the tests of the exporter's TLS (nothing leaves the test's directory)."""
import subprocess
from pathlib import Path


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: Path) -> dict[str, Path]:
    """ca.crt, server.crt/.key (SAN IP 127.0.0.1), client.crt/.key signed by the CA, and
    stranger.crt/.key signed by nobody the server knows."""
    d.mkdir(parents=True, exist_ok=True)
    days = ["-days", "2"]
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=steer test CA", *days, cwd=d)
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                      ("client", "extendedKeyUsage=clientAuth")):
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=steer {name}",
                 cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-extfile", f"{name}.ext", *days, cwd=d)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "stranger.key", "-out", "stranger.crt", "-subj", "/CN=stranger", *days,
             cwd=d)
    return {p.stem + p.suffix.replace(".", "_"): p for p in d.iterdir()}
