"""The device settings a sweep varies (--pause, --offloads): parsing, the order of the settings,
what each cell's device should show, and what a device cannot take. Pure: no ethtool here (the
live tests in test_sweep_live.py switch a real veth)."""
import pytest

from steer.experiment.devsettings import (differences, named_features, parse_offloads, parse_pause,
                                          setting_key, setting_label, setting_problems, settings_of,
                                          target_state)

# a veth as ethtool shows it: GRO off, LRO and hardware GRO fixed off, no pause frames
VETH = {"offloads": {"gro": "off", "gro-hw": "off", "lro": "off", "tso": "on", "gso": "on"},
        "fixed": ["gro-hw", "lro"], "pause": None,
        "why_no_pause": "unsupported by the driver (netlink error: Operation not supported)"}
NIC = {"offloads": {"gro": "on", "gro-hw": "on", "lro": "off", "tso": "on", "gso": "on"},
       "fixed": [], "pause": "on"}


def test_pause_values_in_the_order_given():
    assert parse_pause("on,off") == ["on", "off"]
    assert parse_pause("off") == ["off"]
    for bad in ("", "on,on", "yes", "on,off,maybe"):
        with pytest.raises(ValueError):
            parse_pause(bad)


def test_offload_settings_each_of_one_or_more_features():
    assert parse_offloads("gro=on,gro=off") == [{"gro": "on"}, {"gro": "off"}]
    assert parse_offloads("GRO=off+lro=off, gro=on+lro=on") == [
        {"gro": "off", "lro": "off"}, {"gro": "on", "lro": "on"}]
    assert parse_offloads("gro-hw=off") == [{"gro-hw": "off"}]
    for bad, says in (("gro", "FEATURE=on|off"), ("rxhash=on", "FEATURE=on|off"),
                      ("gro=maybe", "FEATURE=on|off"), ("gro=on+gro=off", "twice"),
                      ("gro=on,gro=on", "twice"), (",", "no setting")):
        with pytest.raises(ValueError, match=says):
            parse_offloads(bad)


def test_settings_run_pause_outermost_and_none_is_one_setting():
    assert settings_of(None, None) == [{}]
    assert settings_of(["on", "off"], [{"gro": "on"}, {"gro": "off"}]) == [
        {"pause": "on", "offloads": {"gro": "on"}}, {"pause": "on", "offloads": {"gro": "off"}},
        {"pause": "off", "offloads": {"gro": "on"}}, {"pause": "off", "offloads": {"gro": "off"}}]
    assert settings_of(["off"], None) == [{"pause": "off"}]
    assert setting_label({}) == "as found"
    assert setting_label({"pause": "on", "offloads": {"gro": "off", "lro": "off"}}) == \
        "pause on, gro off, lro off"
    # equal settings, equal keys, whatever the order their features were given in
    assert setting_key({"offloads": {"gro": "on", "lro": "on"}}) == \
        setting_key({"offloads": {"lro": "on", "gro": "on"}})
    assert setting_key(None) == setting_key({})


def test_a_setting_does_not_carry_over_into_the_next():
    """gro=off, then lro=on: the second setting's GRO is the one found, not the first's off."""
    settings = [{"offloads": {"gro": "off"}}, {"offloads": {"lro": "on"}}]
    assert named_features(settings) == ["gro", "lro"]
    assert target_state(settings[0], NIC, settings) == {"offloads": {"gro": "off", "lro": "off"}}
    assert target_state(settings[1], NIC, settings) == {"offloads": {"gro": "on", "lro": "on"}}
    # {} is the state found, of everything the sweep touches: what is put back after
    assert target_state({}, NIC, settings) == {"offloads": {"gro": "on", "lro": "off"}}
    with_pause = settings_of(["off"], [{"gro": "off"}])
    assert target_state({}, NIC, with_pause) == {"offloads": {"gro": "on"}, "pause": "on"}
    assert target_state(with_pause[0], NIC, with_pause) == {"offloads": {"gro": "off"}, "pause": "off"}


def test_what_a_device_shows_against_what_was_asked():
    want = {"offloads": {"gro": "off"}, "pause": "off"}
    assert differences(want, {"offloads": {"gro": "off"}, "pause": "off"}) == []
    assert differences(want, {"offloads": {"gro": "on"}, "pause": "rx on, tx off"}) == [
        "gro on (asked off)", "pause rx on, tx off (asked off)"]


def test_what_a_device_cannot_take():
    assert setting_problems("veth-rx", VETH, settings_of(None, [{"gro": "on"}, {"gro": "off"}])) == []
    # fixed at the value asked: nothing to switch, nothing wrong
    assert setting_problems("veth-rx", VETH, settings_of(None, [{"lro": "off"}])) == []
    (fixed,) = setting_problems("veth-rx", VETH, settings_of(None, [{"lro": "on"}, {"lro": "off"}]))
    assert fixed == "--offloads: veth-rx's driver fixes lro off: it cannot be switched"
    (pause,) = setting_problems("veth-rx", VETH, settings_of(["on", "off"], None))
    assert pause.startswith("--pause: veth-rx has no Ethernet flow control to switch (unsupported")
    assert setting_problems("eth0", NIC, settings_of(["on", "off"], [{"gro-hw": "off"}])) == []


def test_the_state_to_put_back_is_the_one_recorded_before_the_first_run():
    """host.config's device, as results.json has it: a resumed sweep puts back that, not what a
    killed sweep left on the device."""
    from steer.experiment.devsettings import recorded_state
    device = {"offloads": {"gro": "on", "gro-hw": "off [fixed]", "lro": "off [fixed]",
                           "tso": "on", "gso": "on"},
              "pause": {"ifname": "eth0", "autonegotiate": True, "rx": True, "tx": False,
                        "statistics": {"tx_pause_frames": 0, "rx_pause_frames": 12}}}
    assert recorded_state(device) == {
        "offloads": {"gro": "on", "gro-hw": "off", "lro": "off", "tso": "on", "gso": "on"},
        "fixed": ["gro-hw", "lro"], "pause": "rx on, tx off"}
    veth = dict(device, pause="unsupported by the driver (netlink error: Operation not supported)")
    assert recorded_state(veth)["pause"] is None
    assert recorded_state({"offloads": "unavailable: ethtool not installed"}) is None
    assert recorded_state(None) is None
