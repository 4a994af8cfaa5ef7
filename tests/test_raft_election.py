"""DLedger mode, part 1 (issue 17): the election state machine (broker.raft).

Unit cases follow DLedger 0.3.1.2's handleVote / handleHeartBeat / maintainAsCandidate rule by
rule; the live cases run 3 and 5 members in this process, each with its own remoting server on
127.0.0.1 and real sockets between them, with short timings (the same code as DLedger's 2 s
defaults, scaled down).
"""
from __future__ import annotations

import asyncio
import socket
import os
import time

import pytest

from broker.raft.config import DLedgerConfig, parse_peers
from broker.raft.elector import LeaderElector, Tally
from broker.raft.member_state import MemberState, read_properties
from broker.raft.protocol import (HeartBeatRequest, ParseResult, RequestCode, ResponseCode, Role, VoteRequest,
                                  VoteResponse, VoteResult, decode, encode)
from broker.raft.rpc import ElectionServer, PeerClients
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.store.errors import StoreConfigError
from tests.conftest import free_port

PEERS3 = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"


def cfg(self_id="n0", peers=PEERS3, **kw) -> DLedgerConfig:
    return DLedgerConfig(enableDLegerCommitLog=True, dLegerGroup="RaftNode00", dLegerPeers=peers,
                         dLegerSelfId=self_id, **kw)


class NoRpc:
    async def vote(self, *a):
        raise ConnectionError("no network in this test")

    async def heartbeat(self, *a):
        raise ConnectionError("no network in this test")


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def elector(tmp_path, self_id="n0", clock=None) -> LeaderElector:
    return LeaderElector(MemberState(cfg(self_id), str(tmp_path)), NoRpc(), clock=clock or Clock())


def vote(leader="n1", term=1, end_index=-1, end_term=-1) -> VoteRequest:
    return VoteRequest(group="RaftNode00", leaderId=leader, term=term, ledgerEndIndex=end_index,
                       ledgerEndTerm=end_term, localId=leader, remoteId="n0")


def beat(leader="n1", term=1) -> HeartBeatRequest:
    return HeartBeatRequest(group="RaftNode00", leaderId=leader, term=term, localId=leader, remoteId="n0")


# -- configuration ---------------------------------------------------------------------------------

def test_peers_parse_as_dledger_does():
    peers = parse_peers("n0-127.0.0.1:40911; n1-host-b:40912;n2-[::1]:40913")
    assert list(peers) == ["n0", "n1", "n2"]
    assert peers["n1"].host == "host-b" and peers["n1"].port == 40912  # the id ends at the first '-'
    assert peers["n2"].addr == "[::1]:40913"


@pytest.mark.parametrize("kw,key,words", [
    (dict(dLegerPeers="n0-127.0.0.1:40911;n1-127.0.0.1:40912"), "dLegerPeers", "at least 3"),
    (dict(dLegerPeers="n0:40911;n1-h:1;n2-h:2"), "dLegerPeers", "id-host:port"),
    (dict(dLegerPeers="n0-h:x;n1-h:1;n2-h:2"), "dLegerPeers", "not a port"),
    (dict(dLegerPeers="n0-h:70000;n1-h:1;n2-h:2"), "dLegerPeers", "not a port"),
    (dict(dLegerPeers="n0-h:1;n0-h:2;n2-h:3"), "dLegerPeers", "twice"),
    (dict(dLegerSelfId="n9"), "dLegerSelfId", "not one of"),
    (dict(dLegerGroup=""), "dLegerGroup", "must be set"),
    (dict(preferredLeaderId="n7"), "preferredLeaderId", "not one of"),
    (dict(maxVoteIntervalMs=300), "maxVoteIntervalMs", "must exceed"),
    (dict(heartBeatTimeIntervalMs=0), "heartBeatTimeIntervalMs", "positive"),
])
def test_bad_dledger_config_names_the_key(kw, key, words):
    base = dict(enableDLegerCommitLog=True, dLegerGroup="g", dLegerPeers=PEERS3, dLegerSelfId="n0")
    base.update(kw)
    with pytest.raises(StoreConfigError) as e:
        DLedgerConfig(**base)
    assert e.value.key == key and words in str(e.value)


def test_config_from_broker_conf_strings_with_dledger_defaults():
    c = DLedgerConfig.from_properties({"enableDLegerCommitLog": "true", "dLegerGroup": "RaftNode00",
                                       "dLegerPeers": PEERS3, "dLegerSelfId": "n2", "brokerName": "ignored",
                                       "heartBeatTimeIntervalMs": "500"})
    assert c.self_peer.port == 40913 and c.heartBeatTimeIntervalMs == 500
    assert (c.maxHeartBeatLeak, c.minVoteIntervalMs, c.maxVoteIntervalMs, c.maxWaitAckTimeMs) == (3, 300, 1000, 2500)
    assert DLedgerConfig.from_properties({}).enableDLegerCommitLog is False  # off: the peers are not read


# -- the term file ---------------------------------------------------------------------------------

def test_term_and_vote_survive_a_restart_in_dledgers_file(tmp_path):
    st = MemberState(cfg(), str(tmp_path))
    assert (st.term, st.vote_for) == (0, None)
    st.next_term()
    st.set_vote_for("n2")
    path = tmp_path / "dledger-n0" / "currterm"
    assert read_properties(path.read_text()) == {"currTerm": "1", "voteLeader": "n2"}
    again = MemberState(cfg(), str(tmp_path))
    assert (again.term, again.vote_for) == (1, "n2")
    # a leader writes down the term it led (our addition; DLedger's reader ignores the key)
    again.next_term()
    again.set_vote_for("n0")
    again.change_to_leader(2)
    assert read_properties(path.read_text()) == {"currTerm": "2", "voteLeader": "n0", "ledTerm": "2"}
    assert MemberState(cfg(), str(tmp_path)).led_term == 2


def test_a_corrupt_term_file_refuses_to_start_naming_it(tmp_path):
    d = tmp_path / "dledger-n0"
    d.mkdir()
    (d / "currterm").write_text("currTerm=abc\n")
    with pytest.raises(Exception) as e:
        MemberState(cfg(), str(tmp_path))
    assert "currterm" in str(e.value) and "abc" in str(e.value)


def test_next_term_jumps_to_the_largest_term_heard(tmp_path):
    st = MemberState(cfg(), str(tmp_path))
    st.change_to_candidate(7)  # heard of term 7: not adopted yet (DLedger)
    assert st.term == 0 and st.is_candidate
    assert st.next_term() == 7 and st.vote_for is None
    assert st.next_term() == 8


# -- handleVote, rule by rule ------------------------------------------------------------------------

def test_vote_rules(tmp_path):
    e = elector(tmp_path)
    st = e.state
    st.term = 3
    st.update_ledger(10, 2)
    assert e.handle_vote(vote("n9", 3)).voteResult is VoteResult.REJECT_UNKNOWN_LEADER
    assert e.handle_vote(vote("n0", 3)).voteResult is VoteResult.REJECT_UNEXPECTED_LEADER
    assert e.handle_vote(vote("n1", 3, 20, 1)).voteResult is VoteResult.REJECT_EXPIRED_LEDGER_TERM
    assert e.handle_vote(vote("n1", 3, 9, 2)).voteResult is VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    r = e.handle_vote(vote("n1", 2, 10, 2))
    assert r.voteResult is VoteResult.REJECT_EXPIRED_VOTE_TERM and r.term == 3
    assert st.term == 3 and st.vote_for is None  # none of the refusals moved anything
    assert e.handle_vote(vote("n1", 3, 10, 2)).voteResult is VoteResult.ACCEPT
    assert read_properties((tmp_path / "dledger-n0" / "currterm").read_text())["voteLeader"] == "n1"
    assert e.handle_vote(vote("n1", 3, 10, 2)).voteResult is VoteResult.ACCEPT  # a repeat is let through
    assert e.handle_vote(vote("n2", 3, 11, 2)).voteResult is VoteResult.REJECT_ALREADY_VOTED
    st.leader_id = "n1"
    assert e.handle_vote(vote("n2", 3, 11, 2)).voteResult is VoteResult.REJECT_ALREADY_HAS_LEADER


def test_a_larger_vote_term_makes_a_candidate_that_takes_the_term_next(tmp_path):
    e = elector(tmp_path)
    e.state.change_to_follower(0, "n1")
    r = e.handle_vote(vote("n2", 5))
    assert r.voteResult is VoteResult.REJECT_TERM_NOT_READY
    assert e.state.is_candidate and e.state.term == 0 and e.need_increase_term
    assert e.state.known_max_term == 5


def test_a_vote_for_a_term_below_the_ledgers_is_refused(tmp_path):
    e = elector(tmp_path)
    e.state.term = 2
    e.state.update_ledger(4, 3)  # entries of term 3 while the term is 2 (a restart with an old term file)
    r = e.handle_vote(vote("n1", 2, 4, 3))
    assert r.voteResult is VoteResult.REJECT_TERM_SMALL_THAN_LEDGER and r.term == 3


# -- handleHeartBeat ---------------------------------------------------------------------------------

def test_heartbeat_rules(tmp_path):
    clock = Clock()
    e = elector(tmp_path, clock=clock)
    st = e.state
    st.term = 4
    assert e.handle_heartbeat(beat("n9", 4)).code == ResponseCode.UNKNOWN_MEMBER
    assert e.handle_heartbeat(beat("n0", 4)).code == ResponseCode.UNEXPECTED_MEMBER
    r = e.handle_heartbeat(beat("n1", 3))
    assert r.code == ResponseCode.EXPIRED_TERM and r.term == 4
    assert e.handle_heartbeat(beat("n1", 4)).code == ResponseCode.SUCCESS  # no leader yet: follow it
    assert st.is_follower and st.leader_id == "n1"
    clock.t += 1
    assert e.handle_heartbeat(beat("n1", 4)).code == ResponseCode.SUCCESS
    assert e.last_leader_hb == clock.t * 1000
    assert e.handle_heartbeat(beat("n2", 4)).code == ResponseCode.INCONSISTENT_LEADER
    assert st.leader_id == "n1"
    assert e.handle_heartbeat(beat("n2", 6)).code == ResponseCode.TERM_NOT_READY
    assert st.is_candidate and st.known_max_term == 6 and e.need_increase_term


# -- a candidate's reading of its round ----------------------------------------------------------------

def answers(*results, term=1):
    t = Tally(known_max_term=term)
    for r in results:
        t.add(None if r is None else VoteResponse(voteResult=r, term=term))
    return t


@pytest.mark.parametrize("results,expected", [
    ((VoteResult.ACCEPT, VoteResult.ACCEPT, None), ParseResult.PASSED),
    ((VoteResult.ACCEPT, VoteResult.REJECT_ALREADY_VOTED, VoteResult.REJECT_ALREADY_VOTED), ParseResult.WAIT_TO_VOTE_NEXT),
    ((VoteResult.ACCEPT, None, None), ParseResult.WAIT_TO_REVOTE),  # no quorum of answers
    ((VoteResult.ACCEPT, VoteResult.REJECT_TERM_NOT_READY, None), ParseResult.REVOTE_IMMEDIATELY),
    ((VoteResult.ACCEPT, VoteResult.REJECT_ALREADY_HAS_LEADER, VoteResult.ACCEPT), ParseResult.WAIT_TO_REVOTE),
    ((VoteResult.ACCEPT, VoteResult.REJECT_SMALL_LEDGER_END_INDEX, VoteResult.REJECT_EXPIRED_LEDGER_TERM),
     ParseResult.WAIT_TO_REVOTE),
])
def test_tally_parses_as_dledger(results, expected):
    assert answers(*results).parse(1, lambda n: n >= 2) is expected


def test_tally_a_larger_term_means_vote_next():
    t = answers(VoteResult.ACCEPT, VoteResult.ACCEPT)
    t.add(VoteResponse(voteResult=VoteResult.REJECT_EXPIRED_VOTE_TERM, term=9))
    assert t.parse(1, lambda n: n >= 2) is ParseResult.WAIT_TO_VOTE_NEXT and t.known_max_term == 9


# -- live groups on loopback ---------------------------------------------------------------------------

class Member:
    def __init__(self, root, config):
        self.root, self.config = root, config
        self.state = self.elector = self.server = self.clients = None

    async def start(self):
        self.state = MemberState(self.config, str(self.root))
        self.clients = PeerClients(self.config)
        self.elector = LeaderElector(self.state, self.clients)
        self.server = ElectionServer(self.config, self.elector)
        await self.server.start()
        self.elector.start()
        return self

    async def stop(self):
        await self.elector.stop()
        self.clients.close()
        await self.server.close()


def group_configs(n, **timing):
    ports = [free_port() for _ in range(n)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    t = dict(heartBeatTimeIntervalMs=100, maxHeartBeatLeak=3, minVoteIntervalMs=50, maxVoteIntervalMs=150)
    t.update(timing)
    return [cfg(f"n{i}", peers, **t) for i in range(n)]


async def until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


def settled(members):
    """The one leader every live member follows in one term, or None."""
    leaders = [m for m in members if m.state.is_leader]
    if len(leaders) != 1:
        return None
    lead = leaders[0].state
    ok = all(m.state.is_follower and m.state.leader_id == lead.self_id and m.state.term == lead.term
             for m in members if m is not leaders[0])
    return leaders[0] if ok else None


def at_most_one_leader_per_term(members, seen: dict):
    for m in members:
        if m.state.is_leader:
            assert seen.setdefault(m.state.term, m.state.self_id) == m.state.self_id, "two leaders in one term"


@pytest.mark.parametrize("n", [3, 5])
def test_a_group_elects_one_leader_and_replaces_a_dead_one(tmp_path, n):
    async def main():
        members = [await Member(tmp_path / f"m{i}", c).start() for i, c in enumerate(group_configs(n))]
        seen: dict[int, str] = {}
        try:
            await until(lambda: settled(members), 15, "a leader followed by all")
            at_most_one_leader_per_term(members, seen)
            old = settled(members)
            old_term = old.state.term
            await old.stop()  # the leader dies
            rest = [m for m in members if m is not old]
            await until(lambda: settled(rest), 15, "a new leader among the rest")
            new = settled(rest)
            assert new.state.term > old_term
            at_most_one_leader_per_term(rest, seen)
            # the old leader comes back with its persisted term and follows the new one
            back = await Member(old.root, old.config).start()
            assert back.state.term >= old_term
            members = rest + [back]
            await until(lambda: settled(members), 15, "the old leader to rejoin as a follower")
            assert not back.state.is_leader or back.state.term > new.state.term
        finally:
            for m in members:
                await m.stop()
    asyncio.run(main())


def test_a_restarted_member_never_leads_a_term_it_led_before(tmp_path):
    """The whole group stops and starts again, three times: each leadership is in a new term.
    (DLedger would re-elect the same leader in the same term, its voters accepting the candidate
    they had voted for; after a power cut that lost the leader's unflushed tail, it would then
    write new entries under (index, term) pairs its followers hold with other bodies.)"""
    async def main():
        configs = group_configs(3)
        terms = []
        for _ in range(3):
            persisted = {c.dLegerSelfId: MemberState(c, str(tmp_path / f"m{i}")) for i, c in enumerate(configs)}
            led_before = {sid: st.term for sid, st in persisted.items() if st.led_term == st.term}
            members = [await Member(tmp_path / f"m{i}", c).start() for i, c in enumerate(configs)]
            try:
                await until(lambda: settled(members), 15, "a leader followed by all")
                lead = settled(members)
                terms.append(lead.state.term)
                sid = lead.config.dLegerSelfId
                if sid in led_before:
                    assert lead.state.term > led_before[sid], "led a term it had led before the restart"
                assert lead.state.led_term == lead.state.term  # on disk before its first entry
            finally:
                for m in members:
                    await m.stop()
        assert terms == sorted(set(terms)), f"a leadership repeated a term: {terms}"
    asyncio.run(main())


def test_a_restarted_follower_that_had_stood_as_candidate_does_not_depose_the_leader(tmp_path):
    """A follower that voted for itself in the current term (it stood, and lost) and restarts
    stands in that term first, as DLedger's does: the voters, who have a leader, turn it down, the
    leader's heartbeat reaches it, and the leader keeps its term (a rolling restart of followers
    moves no leadership). Standing in the next term at once would depose the leader."""
    async def main():
        configs = group_configs(3)
        members = [await Member(tmp_path / f"m{i}", c).start() for i, c in enumerate(configs)]
        try:
            await until(lambda: settled(members), 15, "a leader followed by all")
            lead = settled(members)
            term = lead.state.term
            follower = next(m for m in members if m is not lead)
            await follower.stop()
            # as if it had stood in this term: its vote for itself is what it finds at start
            st = MemberState(follower.config, str(follower.root))
            st.set_vote_for(follower.config.dLegerSelfId)
            back = await Member(follower.root, follower.config).start()
            members = [m for m in members if m is not follower] + [back]
            await until(lambda: back.state.is_follower and back.state.leader_id == lead.config.dLegerSelfId, 15,
                        "the restarted member to follow the leader")
            assert lead.state.is_leader and lead.state.term == term
        finally:
            for m in members:
                await m.stop()
    asyncio.run(main())


async def settled_with_watched_links(tmp_path):
    """Three members at DLedger's 2 s heartbeats, settled: (members, leader, followers), every
    follower having had a heartbeat from the leader (its link is watched)."""
    members = [await Member(tmp_path / f"m{i}", c).start()
               for i, c in enumerate(group_configs(3, heartBeatTimeIntervalMs=2000, minVoteIntervalMs=300,
                                                   maxVoteIntervalMs=1000))]
    try:
        await until(lambda: settled(members), 30, "a leader followed by all")
        lead = settled(members)
        rest = [m for m in members if m is not lead]
        await until(lambda: all(m.elector.last_leader_hb > 0 for m in rest), 10, "heartbeats")
    except BaseException:
        for m in members:
            await m.stop()
        raise
    return members, lead, rest


def test_a_dead_leader_is_replaced_without_waiting_out_the_heartbeat_leak(tmp_path):
    """DLedger's defaults (2 s heartbeats, 3 missed) make the followers wait 6 s for a leader
    that is gone. Here its heartbeat links close and its peer port refuses connections (the
    process is gone), so they stand at once: a new leader within 3 s, where the leak alone would
    take 6. Nothing else changes: the new term is the next one, one leader per term."""
    async def main():
        members, old, rest = await settled_with_watched_links(tmp_path)
        seen: dict[int, str] = {}
        try:
            old_term = old.state.term
            t0 = time.monotonic()
            await old.stop()  # its server closes: the port refuses, its links close
            await until(lambda: settled(rest), 3, "a new leader well before 6 s of missed heartbeats")
            assert time.monotonic() - t0 < 3
            assert settled(rest).state.term > old_term
            at_most_one_leader_per_term(rest, seen)
            members = rest
        finally:
            for m in members:
                await m.stop()
    asyncio.run(main())


def test_a_leader_whose_links_close_before_its_listener_is_found_gone(tmp_path):
    """A process killed with -9 closes its sockets one by one: a follower can see the heartbeat
    link close while the process's listening socket still exists, and its probe's connect then
    lands in that socket's backlog, to be reset a moment later when the exit closes it. That
    connect is no sign of life: a new leader well before 6 s of missed heartbeats."""
    async def main():
        members, old, rest = await settled_with_watched_links(tmp_path)
        dying = None
        try:
            old_term = old.state.term
            await old.elector.stop()
            await old.server.close()
            # the exiting process's listener: accepts nothing, and is closed 50 ms after its links
            dying = socket.socket()
            dying.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            dying.bind((old.config.self_peer.host, old.config.self_peer.port))
            dying.listen(16)
            t0 = time.monotonic()
            old.clients.close()  # the heartbeat links close first
            asyncio.get_running_loop().call_later(0.05, dying.close)
            await until(lambda: settled(rest), 3, "a new leader well before 6 s of missed heartbeats")
            assert time.monotonic() - t0 < 3
            assert settled(rest).state.term > old_term
            members = rest
        finally:
            if dying is not None:
                dying.close()
            for m in members:
                await m.stop()
    asyncio.run(main())


def test_a_live_leader_whose_link_drops_is_not_replaced(tmp_path):
    """A heartbeat link that closes while the leader's peer port still answers (the leader lives
    and connects again) starts no election: the followers keep their leader and term."""
    async def main():
        members = [await Member(tmp_path / f"m{i}", c).start()
                   for i, c in enumerate(group_configs(3, heartBeatTimeIntervalMs=300))]
        try:
            await until(lambda: settled(members), 30, "a leader followed by all")
            lead = settled(members)
            term = lead.state.term
            rest = [m for m in members if m is not lead]
            await until(lambda: all(m.elector.last_leader_hb > 0 for m in rest), 10, "heartbeats")
            lead.clients.close(abort=True)  # its links drop; it makes them again at its next round
            t_end = time.monotonic() + 1.5  # five heartbeat intervals: any election would show
            while time.monotonic() < t_end:
                assert settled(members) is lead and lead.state.term == term
                await asyncio.sleep(0.05)
        finally:
            for m in members:
                await m.stop()
    asyncio.run(main())


def test_only_a_member_with_the_longest_ledger_can_win(tmp_path):
    async def main():
        configs = group_configs(3)
        members = [Member(tmp_path / f"m{i}", c) for i, c in enumerate(configs)]
        for m in members:
            m.state = MemberState(m.config, str(m.root))
        # n0 and n2 hold entries up to index 7 of term 1; n1 only up to 5: n1 may never lead
        for m, end in zip(members, (7, 5, 7)):
            m.state.update_ledger(end, 1)
        for m in members:
            m.clients = PeerClients(m.config)
            m.elector = LeaderElector(m.state, m.clients)
            m.server = ElectionServer(m.config, m.elector)
            await m.server.start()
        members[1].elector.start()  # the short one stands first and alone for a while
        await asyncio.sleep(0.5)
        assert not members[1].state.is_leader
        for m in (members[0], members[2]):
            m.elector.start()
        try:
            await until(lambda: settled(members), 15, "a leader")
            assert settled(members).state.self_id in ("n0", "n2")
        finally:
            for m in members:
                await m.stop()
    asyncio.run(main())


def test_a_leader_cut_off_from_the_majority_steps_down(tmp_path):
    async def main():
        members = [await Member(tmp_path / f"m{i}", c).start() for i, c in enumerate(group_configs(3))]
        try:
            await until(lambda: settled(members), 15, "a leader")
            lead = settled(members)
            others = [m for m in members if m is not lead]
            for m in others:  # both followers gone: the leader's rounds find no quorum
                await m.stop()
            t0 = time.monotonic()
            await until(lambda: not lead.state.is_leader, 5, "the isolated leader to step down")
            # maxHeartBeatLeak x interval (300 ms), plus a round
            assert time.monotonic() - t0 < 2.0
        finally:
            await lead.stop()
    asyncio.run(main())


def test_bad_requests_are_refused_and_never_move_the_term(tmp_path):
    async def main():
        port = free_port()
        c = cfg("n0", f"n0-127.0.0.1:{port};n1-127.0.0.1:1;n2-127.0.0.1:2")
        m = Member(tmp_path, c)
        m.state = MemberState(c, str(tmp_path))
        m.clients = PeerClients(c)
        m.elector = LeaderElector(m.state, m.clients)  # not started: only the server answers
        m.server = ElectionServer(c, m.elector)
        await m.server.start()
        conn = await connect("127.0.0.1", port)
        try:
            async def ask(code, body):
                reply = await conn.request(RemotingCommand.request(code, body=body), 5)
                assert reply.code == codes.SUCCESS
                return decode(VoteResponse, bytes(reply.body))
            r = await ask(RequestCode.VOTE, b"{not json")
            assert r.code == ResponseCode.UNEXPECTED_ARGUMENT
            r = await ask(RequestCode.VOTE, b'{"group": "RaftNode00", "leaderId": "n1", "term": "9"}')
            assert r.code == ResponseCode.UNEXPECTED_ARGUMENT
            r = await ask(RequestCode.VOTE, encode(VoteRequest(group="other", leaderId="n1", term=50)))
            assert r.code == ResponseCode.UNKNOWN_GROUP
            r = await ask(RequestCode.VOTE, encode(VoteRequest(group="RaftNode00", leaderId="n1", term=50,
                                                               remoteId="n2")))
            assert r.code == ResponseCode.UNKNOWN_MEMBER
            r = await ask(RequestCode.VOTE, encode(VoteRequest(group="RaftNode00", leaderId="zz", term=50)))
            assert r.voteResult is VoteResult.REJECT_UNKNOWN_LEADER
            r = await ask(RequestCode.HEART_BEAT, encode(HeartBeatRequest(group="RaftNode00", leaderId="zz", term=50)))
            assert r.code == ResponseCode.UNKNOWN_MEMBER
            reply = await conn.request(RemotingCommand.request(RequestCode.PUSH, body=b"{}"), 5)
            assert reply.code == codes.REQUEST_CODE_NOT_SUPPORTED
            assert m.state.term == 0 and m.state.known_max_term == -1 and m.state.vote_for is None
            assert not os.path.exists(tmp_path / "dledger-n0" / "currterm")
            # and a well-formed vote of a known peer is answered
            r = await ask(RequestCode.VOTE, encode(VoteRequest(group="RaftNode00", leaderId="n1", term=0,
                                                               remoteId="n0")))
            assert r.voteResult is VoteResult.ACCEPT and m.state.vote_for == "n1"
        finally:
            conn.close()
            await m.server.close()
    asyncio.run(main())


def test_broker_conf_checks_dledger_keys_and_takes_the_mode():
    from broker.server.broker_config import load_broker_config, load_dledger_config
    keys = {"brokerName": "RaftNode00", "enableDLegerCommitLog": "true", "dLegerGroup": "RaftNode00",
            "dLegerPeers": PEERS3, "dLegerSelfId": "n0"}
    with pytest.raises(StoreConfigError) as e:
        load_broker_config({**keys, "dLegerPeers": "n0-127.0.0.1:40911"})
    assert e.value.key == "dLegerPeers"
    with pytest.raises(StoreConfigError) as e:
        load_broker_config({**keys, "dLegerSelfId": "n7"})
    assert e.value.key == "dLegerSelfId"
    # on: served (no refusal); the store config carries the mode and the member's id
    _, store, unknown = load_broker_config({**keys, "heartBeatTimeIntervalMs": "200"})
    assert unknown == [] and store.enableDLegerCommitLog and store.dLegerSelfId == "n0"
    assert store.dledger_data_dir.endswith("dledger-n0/data")
    d = load_dledger_config({**keys, "heartBeatTimeIntervalMs": "200"})
    assert d.heartBeatTimeIntervalMs == 200 and list(d.peers) == ["n0", "n1", "n2"]
    # off, its keys are known (not reported as unknown) and change nothing
    _, store, unknown = load_broker_config({**keys, "enableDLegerCommitLog": "false", "heartBeatTimeIntervalMs": "500"})
    assert not store.enableDLegerCommitLog
    assert unknown == []
