"""Environments the project ships, as opposed to the adapters over outside simulators and
browsers in :mod:`rlinf.engines`:

* :mod:`rlinf.envs.web_sites` — the demo web sites (shop, wiki, sign-up forms) and fault routes,
  generated from a seed and served by one ``SiteServer``
  (``python -m rlinf.envs.web_sites --port 8080``); web runs browse them through the browser
  engine (:mod:`rlinf.engines.web`).
* :mod:`rlinf.envs.toy_reach` — the pure-numpy reaching task behind ``env_type: toy``, a
  simulator of the embodied runtime's interface (:class:`~rlinf.envs.base.SingleEnv`, in
  :mod:`rlinf.envs.base`, which the engines' adapters implement too);
  :func:`rlinf.engines.simulators.make_vector_env` selects it.

The engines import these worlds; the worlds import nothing of the engines (the interface and the
web sites' bearer tokens, :mod:`rlinf.utils.web_auth`, sit below them).

Nothing is imported here, so that ``import rlinf.envs.web_sites`` stays free of numpy and torch.
"""
