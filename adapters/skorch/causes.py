"""The few skorch behaviours behind the skorch target's fails (read in skorch 1.4's sources;
paths relative to site-packages). The matrix pages list those behind failing clauses above the
clause-by-clause table; each clause's own pointer is ``SkorchAdapter.framework_sources()``.
"""

from __future__ import annotations

from trainspec.conformance.spec.causes import RootCause

__all__ = ["ROOT_CAUSES"]

_CB = "skorch/callbacks"
_NET = "skorch/net.py, NeuralNet"

ROOT_CAUSES: tuple[RootCause, ...] = (
    RootCause(summary="+inf (maximizing) or -inf (minimizing) is a new best and refills "
                      "patience: no finiteness check",
              source=f"{_CB}/scoring.py, ScoringBase._is_best_score; {_CB}/training.py, "
                     "EarlyStopping._is_score_improved",
              clauses=("BEST-1", "NAN-1", "NAN-2", "NAN-3", "PAT-5")),
    RootCause(summary="no best weights are kept in memory: EpochScoring records a score_best "
                      "flag, and only Checkpoint's files hold the weights",
              source=f"{_CB}/scoring.py, EpochScoring._record_score; {_CB}/training.py, "
                     "Checkpoint.save_model",
              clauses=("BEST-1", "BEST-2")),
    RootCause(summary="every periodic checkpoint shares one history.json, the newest: a "
                      "resume from an older one continues after the newest epoch",
              source=f"{_CB}/training.py, Checkpoint (f_history is never formatted with the "
                     "epoch); skorch/net.py, NeuralNet.fit_loop",
              clauses=("RES-1",)),
    RootCause(summary="Checkpoint saves the module, optimizer, criterion and history only: no "
                      "LR scheduler, RNG or callback state, no run id, no config",
              source=f"{_CB}/training.py, Checkpoint.save_model",
              clauses=("CKPT-1", "RES-2", "RES-3", "RES-4")),
    RootCause(summary="LRScheduler builds its scheduler anew at every fit, with last_epoch "
                      "the number of epochs in the history even when it steps every batch",
              source=f"{_CB}/lr_scheduler.py, LRScheduler._get_scheduler",
              clauses=("RES-2", "RES-4")),
    RootCause(summary="EarlyStopping starts afresh on every fit: patience does not survive a "
                      "resume",
              source=f"{_CB}/training.py, EarlyStopping.on_train_begin",
              clauses=("RES-3",)),
    RootCause(summary="a fit trains max_epochs more epochs whatever the loaded history holds, "
                      "and no generator state is restored",
              source=f"{_NET}.fit_loop; {_CB}/training.py, LoadInitState.on_train_begin",
              clauses=("RES-4",)),
    RootCause(summary="a resume loads the saved optimizer state into whatever optimizer the "
                      "net holds",
              source=f"{_NET}.load_params",
              clauses=("RES-5",)),
    RootCause(summary="checkpoint files are written in place, straight over the previous ones",
              source=f"{_NET}.save_params",
              clauses=("CKPT-2",)),
    RootCause(summary="LoadInitState ignores a missing checkpoint and starts afresh, without "
                      "an error",
              source=f"{_CB}/training.py, LoadInitState.on_train_begin",
              clauses=("CKPT-4",)),
    RootCause(summary="no SIGTERM handling: only KeyboardInterrupt (SIGINT) ends a fit "
                      "gracefully, and checkpoints are written only at epoch ends",
              source=f"{_NET}.partial_fit",
              clauses=("CKPT-5",)),
)
