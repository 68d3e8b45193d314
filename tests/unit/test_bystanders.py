"""bench.bystanders on fixture /proc trees: what ran beside a bench is what the processes outside
its own tree ran, kernel threads apart, a comm with spaces and parentheses read whole."""
from bench.bystanders import descendants, ran_beside, read_tasks, text

KTHREAD = 0x00200000


def _proc(root, pid: int, comm: str, ppid: int, utime: int, stime: int, flags: int = 0) -> None:
    d = root / str(pid)
    d.mkdir(exist_ok=True)
    # fields 3.. of proc(5): state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime ...
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} 1 1 0 -1 {flags} 0 0 0 0 {utime} {stime} "
                            "0 0 20 0 1 0 100 0 0\n")


def test_the_tasks_are_read_whole_whatever_their_names(tmp_path):
    _proc(tmp_path, 7, "a (b) c)", 1, 10, 5)
    _proc(tmp_path, 8, "ksoftirqd/1", 2, 3, 4, KTHREAD)
    (tmp_path / "self").mkdir()
    (tmp_path / "99").mkdir()   # gone before its stat was read
    assert read_tasks(str(tmp_path)) == {7: ("a (b) c)", 1, 15, False),
                                         8: ("ksoftirqd/1", 2, 7, True)}


def test_only_what_ran_outside_the_benchs_tree_is_counted():
    # the bench (10), its iperf3 (11) and that one's child (12); a bystander (20) and one that
    # began meanwhile (21); a kernel thread (30); a pid reused by another command (40)
    before = {10: ("python", 1, 100, False), 11: ("iperf3", 10, 50, False),
              20: ("agent", 1, 1000, False), 30: ("kworker/0:1", 2, 5, True),
              40: ("old", 1, 500, False)}
    after = {10: ("python", 1, 900, False), 11: ("iperf3", 10, 450, False),
             12: ("iperf3", 11, 300, False), 20: ("agent", 1, 1300, False),
             21: ("apt", 1, 40, False), 30: ("kworker/0:1", 2, 25, True),
             40: ("new", 1, 10, False)}
    assert descendants(10, {p: t[1] for p, t in after.items()}) == {10, 11, 12}
    ran = ran_beside(before, after, 10, 0.01)
    assert ran == {"seconds": 3.5, "top": [("agent[20]", 3.0), ("apt[21]", 0.4),
                                           ("new[40]", 0.1)],
                   "kthread_seconds": 0.2, "kthread_top": [("kworker/0:1[30]", 0.2)]}
    assert text(ran) == ("other tasks 3.50 CPU-s (agent[20] 3.00, apt[21] 0.40, new[40] 0.10); "
                         "kernel threads 0.20 (kworker/0:1[30] 0.20)")
    quiet = ran_beside(before, before, 10, 0.01)
    assert quiet["seconds"] == 0 and text(quiet) == ""
