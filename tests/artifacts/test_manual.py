"""steer(1) and the bash completion script, both generated from the parser: every command and
option is in each, the man page renders without a groff warning, and bash completes what a
person types."""
import shutil
import subprocess

import pytest

from steer.cli.main import build_parser
from steer.cli.manual import bash_completion, commands, man_page

PARSER = build_parser()
OPTIONS = {name: [o for a in p._actions for o in a.option_strings if o not in ("-h", "--help")]
           for name, (_, p) in commands(PARSER).items()}


@pytest.mark.skipif(not shutil.which("groff"), reason="groff not installed")
def test_man_page_renders_cleanly_and_names_every_command_and_option():
    page = man_page(PARSER, date="2026-11-23")
    r = subprocess.run(["groff", "-man", "-ww", "-z", "-Tutf8"], input=page, text=True,
                       capture_output=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    text = subprocess.run(["groff", "-man", "-Tutf8", "-P", "-cbou", "-rLL=200n"], input=page,
                          text=True, capture_output=True, check=True).stdout
    text = text.replace("\u2010", "-").replace("\u2212", "-")   # groff's hyphen and minus signs
    for name, opts in OPTIONS.items():
        assert f"\n   {name}\n" in text, name
        for o in opts:
            assert o in text, (name, o)
    assert "EXIT STATUS" in text and "/sys/fs/bpf/steer" in text
    assert "(default: 99)" in text   # --sample-hz's default, expanded as --help shows it


def _complete(script: str, *words: str) -> list[str]:
    """What bash offers for the last of WORDS (steer WORDS...)."""
    line = " ".join(f"'{w}'" for w in ("steer", *words))
    r = subprocess.run(["bash", "-c", f"{script}\nCOMP_WORDS=({line}); "
                        f"COMP_CWORD={len(words)}; _steer; printf '%s\\n' \"${{COMPREPLY[@]}}\""],
                       capture_output=True, text=True, check=True)
    return r.stdout.split()


def test_bash_completion_completes_commands_options_and_values():
    script = bash_completion(PARSER)
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert _complete(script, "to") == ["topology", "top"]
    assert _complete(script, "") == list(OPTIONS) + ["--help", "--version"]
    assert _complete(script, "flows", "--tim") == ["--timing"]
    assert _complete(script, "flows", "--timing", "") == ["auto", "sampled", "exact", "counts"]
    assert _complete(script, "top", "--so") == ["--sort"]
    assert "lo" in _complete(script, "pin", "--dev", "")
    assert _complete(script, "flows", "--duration", "") == []   # a number: nothing to offer
    for name, opts in OPTIONS.items():
        assert sorted(_complete(script, name, "-")) == sorted(opts + ["-h", "--help"]), name


def test_a_device_name_is_offered_as_it_is_and_never_run(tmp_path):
    """Device and namespace names are anyone's to choose (a device named $(cmd) is valid): bash
    completion offers them as they are, and runs nothing of them."""
    devices = tmp_path / "net"
    devices.mkdir()
    hostile = "$(touch ran)"   # 12 bytes, no '/' or space: a valid device name
    for name in ("eth0", "`touch ran`", hostile):
        (devices / name).mkdir()
    script = bash_completion(PARSER).replace("/sys/class/net", str(devices))
    r = subprocess.run(["bash", "-c", f"cd {tmp_path}\n{script}\nCOMP_WORDS=(steer pin --dev ''); "
                        "COMP_CWORD=3; _steer; printf '%s\\n' \"${COMPREPLY[@]}\""],
                       capture_output=True, text=True, check=True)
    assert sorted(r.stdout.splitlines()) == sorted(["eth0", "`touch ran`", hostile])
    assert not (tmp_path / "ran").exists()
    assert _complete(script.replace(str(devices), "/nonexistent"), "pin", "--dev", "") == []
