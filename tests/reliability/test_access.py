"""Every door checks who is knocking (issue 55, part 1): a login with no role in a project finds
no trace of it on any path (harness.access_walk), and wrong passwords are held to a few a minute."""

from __future__ import annotations

from harness.access_walk import GUESSES, walk
from ui.logins import PER_MINUTE, Logins


def test_a_login_without_a_role_reads_nothing_of_a_project_on_any_path(bundle, tmp_path):
    found = walk(bundle, tmp_path)
    assert found["foreign_reads_allowed"] == 0, found["foreign_reads"]
    assert found["paths_without_rule"] == 0 and found["paths_checked"] >= 10
    assert found["login_guesses_per_minute_allowed"] == PER_MINUTE < GUESSES
    assert found["right_password_refused_while_locked"]


def test_wrong_passwords_lock_a_name_and_an_address_for_a_minute_then_unlock():
    now = [0.0]
    logins = Logins([("ann", "right")], per_minute=3, clock=lambda: now[0])
    assert [logins.check("ann", "wrong", "10.0.0.1") for _ in range(5)] == [False] * 5
    assert logins.tried == 3, "past the limit no password is compared"
    assert not logins.check("ann", "right", "10.0.0.2"), "the name is locked, from any address"
    assert not logins.check("bob", "anything", "10.0.0.1"), "and the address, for any name"
    assert logins.check("carol", "x", "10.0.0.3") is False and logins.tried == 4
    now[0] = 61.0
    assert logins.check("ann", "right", "10.0.0.1"), "a minute after, the right password works"
