"""Character-aware language models (Kim, Jernite, Sontag & Rush 2016), the testbed of Greff et
al. 2017's Table 1a.

    builders.py    the builder `char_lm`, the trained-weights helpers
    tokenizer.py   `CharLMTokenizer`: words to word ids and character ids (the spelling rules)
    generation.py  `generate`: text from a prompt (HighwayZooModel.generate)
    presets.json   the named nets: builder arguments, metadata, shipped weights' records
    weights/       the shipped weights and the vocabularies they were trained with
"""

from pathlib import Path

from zoo.char_lm.builders import (
    CHAR_LM_OVERRIDES,
    char_lm,
    parameter_count,
    set_trained_weights,
    trained_weights,
)
from zoo.char_lm.tokenizer import (
    END,
    END_CHAR,
    EOS,
    EOS_CHAR,
    PAD,
    PAD_CHAR,
    START,
    START_CHAR,
    UNK,
    UNK_CHAR,
    CharLMTokenizer,
    spelling,
)
from zoo.registry import register_presets

register_presets(Path(__file__).with_name("presets.json"))

__all__ = [
    "CHAR_LM_OVERRIDES", "END", "END_CHAR", "EOS", "EOS_CHAR", "PAD", "PAD_CHAR", "START",
    "START_CHAR", "UNK", "UNK_CHAR", "CharLMTokenizer", "char_lm", "parameter_count",
    "set_trained_weights", "spelling", "trained_weights",
]
