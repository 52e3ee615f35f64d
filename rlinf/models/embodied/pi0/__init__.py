"""π0 / π0.5 checkpoints in plain PyTorch: openpi's PyTorch folders, RLinf's layout and LeRobot 0.6
folders (:func:`load_pi0` / :func:`save_pi0`), the model (:class:`Pi0Model`: PaliGemma prefix,
Gemma action expert, joint attention, Euler sampling with a prefix cache), the input pipeline
(:class:`Pi0Policy`) and tiny real-layout checkpoints (:mod:`.tiny`). In the embodied recipe
(``model_type: pi0`` / ``pi05``): :mod:`.rl_policy` (πRL log-probs, value and noise heads) and
:mod:`.build` (``actor.model`` -> the policy, checks from the folder's metadata). See
``docs/pi0_checkpoints.md``."""

from rlinf.models.embodied.pi0.checkpoint import Pi0CheckpointError, inspect_pi0_folder
from rlinf.models.embodied.pi0.loading import Pi0Plan, load_pi0, plan_pi0, save_pi0
from rlinf.models.embodied.pi0.modeling import Pi0Inputs, Pi0Model
from rlinf.models.embodied.pi0.normalization import NormStats
from rlinf.models.embodied.pi0.policy import Pi0Options, Pi0Policy

__all__ = ["NormStats", "Pi0CheckpointError", "Pi0Inputs", "Pi0Model", "Pi0Options", "Pi0Plan", "Pi0Policy",
           "inspect_pi0_folder", "load_pi0", "plan_pi0", "save_pi0"]
