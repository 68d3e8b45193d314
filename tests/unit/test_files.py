"""Where root writes and removes: directories someone else made are refused, links are never
followed out of steer's own directories, files are written under unguessable names."""
import os
import pwd

import pytest

from steer.kernel.files import UnsafePath, remove_tree, trusted_dir, write_atomically

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def test_a_missing_directory_is_made_0700(tmp_path):
    d = tmp_path / "state"
    assert trusted_dir(str(d))
    assert (os.stat(d).st_mode & 0o777) == 0o700
    assert not trusted_dir(str(tmp_path / "other"), create=False)


@root_only
def test_a_directory_another_user_made_first_is_refused(tmp_path):
    d = tmp_path / "steer"
    d.mkdir(mode=0o700)
    os.chown(d, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(UnsafePath, match="belongs to uid .*rm -r"):
        trusted_dir(str(d))


@pytest.mark.parametrize("mode, who", [(0o777, "others"), (0o770, "its group"), (0o1777, "others")])
def test_a_directory_others_may_write_is_refused(tmp_path, mode, who):
    d = tmp_path / "steer"
    d.mkdir()
    os.chmod(d, mode)
    with pytest.raises(UnsafePath, match=f"writable by {who}"):
        trusted_dir(str(d))


def test_a_link_in_place_of_the_directory_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", tmp_path / "steer")
    with pytest.raises(UnsafePath, match="not a directory but a link"):
        trusted_dir(str(tmp_path / "steer"))


def test_removal_never_follows_a_link_out(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep")
    pins = tmp_path / "pins"
    (pins / "eth0").mkdir(parents=True)
    (pins / "eth0" / "link-generic").write_text("")
    (pins / "eth0" / "rules").write_text("")
    os.symlink(victim, pins / "eth0" / "maps")           # a directory link inside
    os.symlink(victim / "precious", pins / "file-link")   # a file link inside
    os.symlink(victim, tmp_path / "dev-link")             # the directory itself a link
    assert remove_tree(str(pins), first="link-")
    assert not pins.exists()
    assert remove_tree(str(tmp_path / "dev-link"))
    assert not os.path.lexists(tmp_path / "dev-link")
    assert (victim / "precious").read_text() == "keep"
    assert not remove_tree(str(tmp_path / "gone"))


def test_a_write_goes_through_a_new_file_not_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "results.json"
    for guess in ("results.json.tmp", ".results.json.tmp", "results.json~"):
        os.symlink(victim, tmp_path / guess)
    write_atomically(str(out), "new")
    write_atomically(str(out), b"newer")
    assert out.read_bytes() == b"newer" and not out.is_symlink()
    assert victim.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["victim", "results.json", "results.json.tmp", ".results.json.tmp", "results.json~"])
