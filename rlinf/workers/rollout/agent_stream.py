"""The fully asynchronous stream of a tool agent's rollout rank: :class:`~rlinf.workers.rollout.
continuous.StreamLoop` whose episodes are multi-turn (:mod:`rlinf.workers.rollout.agent_loop`).

An episode is in one of three states: generating a turn (possibly continued across rounds after
a stop for weights or for new groups: the turn's tokens so far are kept with their log-probs and
versions, and the turn resumes from prompt + response + those tokens), waiting for its tool
results (it holds no generation slot: other episodes generate meanwhile, new ones are admitted up
to ``max_episodes``), or ended. A group is put into the channel when its episodes all ended.
Tool-result tokens carry version -1 (no policy sampled them).
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, field, replace

from rlinf.data.prompt_dataset import Prompt
from rlinf.engines.rollout.stops import cut_at_stop
from rlinf.engines.tools.base import ToolSession
from rlinf.workers.rollout.agent_loop import Episode
from rlinf.workers.rollout.continuous import IDLE_S, StreamGroup, StreamLoop, attach_versions


@dataclass
class AgentRow:
    """An episode in flight and the unfinished turn it is generating (empty between turns)."""

    episode: Episode
    group: str = ""
    partial_ids: list[int] = field(default_factory=list)
    partial_lps: list[float] = field(default_factory=list)
    partial_versions: list[int] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.episode.end_reason is not None

    def can_generate(self) -> bool:
        return not self.ended and not self.episode.pending


class AgentStreamLoop(StreamLoop):
    """:class:`StreamLoop` over tool episodes; ``worker`` is an
    :class:`~rlinf.workers.rollout.agent_worker.AgentRolloutWorker` (its ``loop`` runs the turns)."""

    def _new_group(self, gid: str, prompt: Prompt, seed: int) -> StreamGroup:
        rows = [AgentRow(Episode(0, list(prompt.token_ids), ToolSession(f"{gid}.{k}")), gid) for k in range(self.n)]
        return StreamGroup(gid, prompt, seed, rows)

    def _rows(self):
        return [r for g in self.groups.values() for r in g.members]

    def _collect_results(self) -> None:
        """Append the results of every episode whose calls all returned (it may end there)."""
        for r in self._rows():
            e = r.episode
            if e.pending and all(f.done() for f in e.pending):
                self.worker.loop._append_results(e)

    def _can_generate(self) -> bool:
        self._collect_results()
        return any(r.can_generate() for r in self._rows())

    def _wait_for_work(self) -> None:
        futures = [f for r in self._rows() for f in r.episode.pending if not f.done()]
        if futures:
            wait(futures, timeout=IDLE_S, return_when=FIRST_COMPLETED)

    def _group_done(self, group: StreamGroup) -> bool:
        return all(r.ended for r in group.members)

    def _one_round(self) -> None:
        loop, base = self.worker.loop, self.sampling
        rows = [r for r in self._rows() if r.can_generate()]
        had_room = self.in_flight + self.n <= self.max_episodes
        self._stopped_for = None
        self._probe_result = False
        stops = tuple(dict.fromkeys([*base.stop, *loop.fmt.stop_strings]))
        version = self.worker.policy_version
        loop.version = version
        # a turn's first token may not be EOS (as in AgentLoop); a continued turn has its first token
        for fresh in (True, False):
            part = [r for r in rows if (not r.partial_ids) == fresh]
            if not part:
                continue
            budget = loop.budgets.max_response_length
            limits = [min(budget - len(r.episode.response_ids) - len(r.partial_ids),
                          base.max_new_tokens - len(r.partial_ids)) for r in part]
            sampling = replace(base, stop=stops, max_new_tokens=max(1, max(limits)),
                               min_new_tokens=min(base.min_new_tokens, 1) if fresh else 0)
            seed = (self.groups[part[0].group].seed + 7919 * self._round) % (2 ** 31)
            gens = self.worker.engine.generate(
                [r.episode.prompt_ids + r.episode.response_ids + r.partial_ids for r in part], sampling,
                n=1, seed=seed, should_stop=self._should_stop(had_room))
            for g in gens:
                self._extend(part[g.prompt_index], g, max(limits[g.prompt_index], 0), version, stops)
        self._count_round()

    def _extend(self, row: AgentRow, gen, limit: int, version: int, stops: tuple[str, ...]) -> None:
        ids, lps = list(gen.token_ids)[:limit], list(gen.logprobs)[:limit]
        row.partial_ids += ids
        row.partial_lps += lps
        row.partial_versions += [version] * len(ids)
        unfinished = gen.finish_reason == "interrupted" and len(ids) < limit
        if unfinished and not (stops and cut_at_stop(row.partial_ids, self.worker.tokenizer, stops) is not None):
            return  # the turn goes on in a later round
        e, loop = row.episode, self.worker.loop
        room = loop.budgets.max_response_length - len(e.response_ids)
        loop.finish_turn(e, row.partial_ids, row.partial_lps, row.partial_versions, room, stops)
        row.partial_ids, row.partial_lps, row.partial_versions = [], [], []

    def _group_batch(self, group: StreamGroup):
        episodes = [r.episode for r in group.members]
        batch = self.worker.episodes_batch(episodes, [group.prompt] * len(episodes), self.n)
        attach_versions(batch, [e.versions for e in episodes], self.worker.policy_version)
        return batch
