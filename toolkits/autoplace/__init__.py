"""``python -m toolkits.autoplace``: the placement planner's command line (issue 46).

Ranks every placement the grammar allows for a config's roles (collocated, disaggregated,
hybrid; lookahead and pipeline stages where the recipe has them) by the step time an event
simulation predicts from a profile of the roles, next to the config's own placement::

    python -m toolkits.autoplace CONFIG --profile P.yaml [--nodes N --accelerators-per-node M]
                                 [--top K] [--json] [--out placed.yaml] [--png timeline.png]
    python -m toolkits.autoplace CONFIG --measure-steps K [--measure-sizes 1|2] [--profile P.yaml] [...]

* the table: rank (``*`` marks the config's own placement), placement, mode, predicted seconds per
  step, predicted speed-up over the config's own placement, the bottleneck role, peak memory per
  accelerator; then the dropped candidates (memory, or the config's own rules: batch sizes that
  must divide over the processes) with their reasons, and the prediction's assumptions;
* ``--json``: the same for every candidate, dropped ones with their reason;
* ``--out placed.yaml``: the config with the best placement and knobs, self-contained (a
  ``defaults:`` list composed in), checked by reading it back; the command that runs it is printed;
* ``--png``: the predicted step of the best and of the config's own placement, one above the other;
* ``--measure-steps K``: first run K training steps of the config as placed (no validation, no
  checkpoints; :func:`rlinf.runners.autoplace_measure.measure_profile`), write the profile they
  measure (to ``--profile``, default ``<runner.output_dir>/<runner.experiment_name>/autoplace_profile.yaml``)
  and plan with it; with ``--measure-sizes 2`` (the default) K more steps of a placement that gives
  the roles other unit counts, so each role's scaling is measured, not assumed
  (:mod:`toolkits.autoplace.sizes`);

The cluster planned for: ``--nodes`` / ``--accelerators-per-node``, else the profile's ``nodes`` /
``accelerators_per_node``, else the config's ``cluster:`` (its ``node_groups`` always). The samples
of a step: the profile's ``samples_per_step``, else the config's batch. Bad input (a profile with a
missing or negative figure, a role the config does not place, a role larger than one accelerator,
a cluster where nothing fits, a kind of run the planner does not plan) is one ``error:`` line and
exit status 2; nothing is started. The model and its limits: docs/placement_planner.md.

Example (run from the repository root; the profile is a hand-written illustration)::

    python -m toolkits.autoplace examples/math/config/grpo_tiny_cpu.yaml \\
        --profile toolkits/autoplace/profiles/grpo_tiny_cpu.yaml --top 5 --out /tmp/placed.yaml
"""
