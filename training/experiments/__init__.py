"""The studies: each a `highway-zoo` command, each a `Study` run by `run_study`, each writing
its data (results.json), table (table.md) and figure; `pretrain` makes the shipped weights.

    study.py       what a study is (`Study`: settings, jobs, run_one, summary, table, figure),
                   the one runner of resumable studies (`run_study`), `format_table`, `summarise`
    fc.py          the FC nets the image studies compare, and one of them trained (`FCStudy`)
    demo.py        `demo`: highway vs plain by depth, one seed (the README's first command)
    sweep.py       `sweep`: NIPS 2015 Fig. 1 with one recipe, over seeds
    bias_study.py  `bias-study`: final training loss against the transform-gate bias (a
                   sweep, with its own table and figure)
    variants.py    `variants`: Greff et al. 2017 Table 1a on FC nets
    lm_variants.py `variants --corpus`: Table 1a in a character-aware language model
    fig1.py        `fig1`: Fig. 1 by the paper's random search (`training.tuning`)
    transfer.py    `transfer`: a pretrained body fine-tuned on another dataset
    pretrain.py    `pretrain`: the weights shipped with the zoo's families
"""
