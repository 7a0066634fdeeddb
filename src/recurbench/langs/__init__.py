"""Regular-language recognisers (RSA paper, Sec. 4.2 and Table 2): decoder-only Transformers with
absolute, relative or REM position information, and an LSTM, trained to emit two target units per
symbol (:mod:`recurbench.data.langs`)."""

from recurbench.langs.models import LANG_MODELS, LangArchitecture, LangModelConfig, build_recognizer
from recurbench.langs.training import LangTrainConfig, LangTrainResult, train_recognizer

__all__ = [
    "LANG_MODELS",
    "LangArchitecture",
    "LangModelConfig",
    "LangTrainConfig",
    "LangTrainResult",
    "build_recognizer",
    "train_recognizer",
]
