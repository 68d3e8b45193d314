"""The device resolver's bounds: what it keeps, and how many new devices it looks up a second
(each one a child that enters the device's namespace)."""
from steer.trace import netdevs
from steer.trace.netdevs import MAX_DEVICES, NEW_PER_SECOND, DeviceResolver


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _resolver(monkeypatch):
    looked_up = []

    def resolve(netns, ifindex):
        looked_up.append((netns, ifindex))
        return {"dev": f"eth{ifindex}", "netns": str(netns)}
    monkeypatch.setattr(netdevs.DeviceResolver, "_resolve", staticmethod(resolve))
    clock = Clock()
    return DeviceResolver(clock=clock), clock, looked_up


def test_a_burst_of_new_devices_is_looked_up_at_a_bounded_rate(monkeypatch):
    r, clock, looked_up = _resolver(monkeypatch)
    got = [r(1, i) for i in range(NEW_PER_SECOND * 3)]
    assert len(looked_up) == NEW_PER_SECOND
    assert all(g["dev"] for g in got[:NEW_PER_SECOND])
    assert all(g["dev"] is None and "not looked up yet" in g["error"]
               for g in got[NEW_PER_SECOND:])
    # the ones turned away are looked up once the budget comes back, and what was found stays
    clock.now += 1.0
    assert r(1, NEW_PER_SECOND)["dev"] == f"eth{NEW_PER_SECOND}"
    assert r(1, 0)["dev"] == "eth0" and len(looked_up) == NEW_PER_SECOND + 1


def test_the_devices_kept_stay_bounded_and_the_newest_stay(monkeypatch):
    r, clock, looked_up = _resolver(monkeypatch)
    for i in range(MAX_DEVICES * 2):
        clock.now += 1.0 / NEW_PER_SECOND   # the rate the budget allows
        r(i, 1)
        assert len(r._cache) <= MAX_DEVICES
    assert len(looked_up) == MAX_DEVICES * 2
    # the last looked up is still known: asked again, it is not looked up again
    r(MAX_DEVICES * 2 - 1, 1)
    assert len(looked_up) == MAX_DEVICES * 2


def test_a_description_is_read_again_after_its_time(monkeypatch):
    r, clock, looked_up = _resolver(monkeypatch)
    r(1, 1)
    clock.now += netdevs.CACHE_SECONDS - 1
    r(1, 1)
    assert len(looked_up) == 1
    clock.now += 2
    r(1, 1)
    assert len(looked_up) == 2
