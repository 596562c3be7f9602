"""The experiments' commands: demo, sweep, bias-study, variants, fig1, nips-table, transfer,
pretrain (training/experiments/)."""

from __future__ import annotations

import json
from pathlib import Path

from highway_zoo.cli.args import (
    add_activation,
    add_checkpoint_every,
    add_data_dir,
    add_epochs,
    add_in_process,
    add_init,
    add_list,
    add_out,
    add_seed,
    add_seeds,
    add_subset,
    depth,
    dtype_policy,
    finite,
    positive,
    rates,
)


def _depths(p, default) -> None:
    add_list(p, "--depths", item=depth, default=default, help="network depths")


# --- demo -------------------------------------------------------------------------


def _demo_arguments(p) -> None:
    _depths(p, (10, 20, 50))
    add_init(p)
    add_epochs(p)
    add_data_dir(p)
    add_out(p, "output directory", "runs/demo-TIME", resumable=True)
    add_seed(p)
    p.add_argument("--transform-bias", type=finite, metavar="B",
                   help="the highway nets' b_T (default -2)")


def demo(args) -> None:
    from training.experiments.demo import demo as demo_

    extra = {} if args.transform_bias is None else {"transform_bias": args.transform_bias}
    demo_(args.depths, init=args.init, epochs=args.epochs, data_dir=args.data_dir,
          out=args.out, seed=args.seed, **extra)


# --- sweep and bias-study ---------------------------------------------------------------


def _sweep_arguments(p) -> None:
    from training.experiments.fc import KINDS

    _depths(p, (10, 20, 50, 100))
    add_list(p, "--kinds", choices=KINDS, default=KINDS, help="the kinds of net")
    add_seeds(p, 1)
    add_activation(p)
    add_list(p, "--transform-bias", item=finite, default=(-2.0,), metavar="B",
             help="the highway nets' b_T; several give one series each")
    add_init(p)
    add_epochs(p)
    add_data_dir(p)
    add_out(p, "output directory", "runs/sweep-TIME", resumable=True)
    add_in_process(p)


def sweep(args) -> None:
    from training.experiments.sweep import sweep as sweep_

    sweep_(args.depths, args.kinds, args.seeds, activation=args.activation,
           transform_bias=args.transform_bias, init=args.init, epochs=args.epochs,
           data_dir=args.data_dir, out=args.out, isolate=not args.in_process)


def _bias_study_arguments(p) -> None:
    p.description = ("Trains highway FC nets (MNIST) at each depth with fixed transform-gate "
                     "biases and plots the final training loss against the bias, a line per "
                     "depth.")
    _depths(p, (50, 100))
    add_list(p, "--transform-bias", item=finite, default=(-1, -2, -3, -4, -6, -8, -10),
             metavar="B", help="the b_T values")
    add_seeds(p, 1)
    add_activation(p)
    p.add_argument("--recipe", default="adam_fc", help="a recipe name (default adam_fc)")
    add_epochs(p)
    add_data_dir(p)
    add_out(p, "output directory", "runs/bias-study-TIME", resumable=True)
    add_in_process(p)


def bias_study(args) -> None:
    from training.experiments.bias_study import bias_study as bias_study_

    bias_study_(args.depths, args.transform_bias, args.seeds, activation=args.activation,
                epochs=args.epochs, recipe=args.recipe, data_dir=args.data_dir, out=args.out,
                isolate=not args.in_process)


# --- variants -----------------------------------------------------------------------


def _variants_arguments(p) -> None:
    from layers.variants import ALL_VARIANTS
    from training.experiments.variants import MODES

    p.description = (
        "Trains every variant with one recipe and budget at every depth and seed, at equal "
        "width (50) and at about equal parameters per layer (width chosen per variant), and "
        "writes results.json, table.md and variants.png.")
    add_list(p, "--variants", choices=ALL_VARIANTS, default=ALL_VARIANTS,
             help="the highway variants (Greff et al.'s six, then the gated skips)")
    _depths(p, (10, 20, 50, 100))
    add_seeds(p, 3)
    add_list(p, "--widths", choices=MODES, default=MODES,
             help="equal width, and/or about equal parameters per layer")
    p.add_argument("--dataset", choices=("mnist", "fashion_mnist"), default="mnist",
                   help="default mnist")
    add_data_dir(p)
    add_subset(p)
    add_activation(p)
    p.add_argument("--transform-bias", type=finite, default=-2.0, metavar="B",
                   help="b_T (default -2)")
    add_init(p)
    add_epochs(p)
    p.add_argument("--learning-rate", type=finite, default=None, metavar="LR",
                   help="the recipe's base learning rate replaced (default: adam_fc's 5e-3)")
    p.add_argument("--per-layer", action="store_true",
                   help="HighwayDense layers instead of one HighwayStack (same function)")
    lm = p.add_argument_group(
        "on a language model (Greff et al.'s own testbed): --corpus selects it; depths, "
        "widths, dataset, activation, init and learning rate do not apply")
    lm.add_argument("--corpus", metavar="DIR", help="a text in Mikolov's format "
                    "(`highway-zoo prepare-text`): train the variants in --model on it")
    lm.add_argument("--model", default=None, metavar="NAME",
                    help="the language model (default lstm_char_small_ptb); Residual gets "
                    "twice its highway layers, as in the paper, and each gated skip the "
                    "count that matches coupled's highway parameters")
    lm.add_argument("--max-train-tokens", type=positive, metavar="N",
                    help="train on the first N tokens of train.txt only")
    add_checkpoint_every(lm, " each run")
    add_out(p, "output directory", "runs/variants-TIME", resumable=True)
    add_in_process(p)
    p.add_argument("--merge", nargs="+", metavar="DIR",
                   help="train nothing: put finished studies of other variants on the same "
                   "data and recipe (e.g. Greff's six and the gated skips) into one "
                   "results.json, table.md and variants.png under --out")


def _lm_variants(args) -> None:
    from training.experiments.lm_variants import lm_variants_study

    defaults = {"depths": [10, 20, 50, 100], "max_train_examples": None,
                "max_test_examples": None, "transform_bias": -2.0, "learning_rate": None,
                "per_layer": False}
    given = [k for k, v in defaults.items()
             if (list(getattr(args, k)) if isinstance(v, list) else getattr(args, k, v)) != v]
    if given:
        raise ValueError(f"--{given[0].replace('_', '-')} applies to the FC nets; with --corpus "
                         "the study trains a language model (its own recipe and layout).")
    lm_variants_study(args.corpus, model=args.model or "lstm_char_small_ptb",
                      variants=args.variants, seeds=args.seeds, epochs=args.epochs,
                      max_train_tokens=args.max_train_tokens,
                      checkpoint_every=args.checkpoint_every, out=args.out,
                      isolate=not args.in_process)


def variants(args) -> None:
    from training.experiments.variants import merge_studies, variants_study

    if args.merge:
        if args.out is None:
            raise ValueError("--merge needs --out DIR, where the merged results go.")
        first = Path(args.merge[0]) / "results.json"
        if first.is_file() and "corpus" in json.loads(first.read_text()):
            from training.experiments.lm_variants import merge_studies as merge_lm_studies

            merge_lm_studies(args.merge, args.out)  # language-model studies
        else:
            merge_studies(args.merge, args.out)
        return
    if args.corpus is not None:
        _lm_variants(args)
        return
    if args.model is not None or args.max_train_tokens is not None or args.checkpoint_every:
        raise ValueError("--model, --max-train-tokens and --checkpoint-every need --corpus (the "
                         "language-model study).")
    variants_study(
        args.variants, args.depths, args.seeds, modes=args.widths, dataset=args.dataset,
        data_dir=args.data_dir, max_train_examples=args.max_train_examples,
        max_test_examples=args.max_test_examples, activation=args.activation,
        transform_bias=args.transform_bias, init=args.init, epochs=args.epochs,
        learning_rate=args.learning_rate, stacked=not args.per_layer, out=args.out,
        isolate=not args.in_process,
    )


# --- fig1 ---------------------------------------------------------------------------


def _fig1_arguments(p) -> None:
    from training.experiments.fig1 import DEPTHS, KINDS

    p.description = (
        "Runs the paper's random search (SGD + momentum; learning rate, momentum, decay per "
        "epoch, relu/tanh, b_T in [-10, -1] for highway nets) with KerasTuner for every net, "
        "ranks runs by final training loss and draws Fig. 1: the best run's loss per epoch "
        "and the mean of the top 10. Run the same command again to resume (finished trials "
        "are kept); distributed with KerasTuner's variables (see "
        "training/experiments/fig1.py).")
    _depths(p, DEPTHS)
    add_list(p, "--kinds", choices=KINDS, default=KINDS, help="the kinds of net")
    p.add_argument("--trials", type=positive, default=100, help="runs per net (default 100)")
    add_epochs(p, 12)
    p.add_argument("--top", type=positive, default=10, help="right panel: mean of the best "
                   "N final losses (default 10)")
    p.add_argument("--out", metavar="DIR", help="output directory (default runs/fig1); run "
                   "the same command again to resume")
    add_data_dir(p)
    p.add_argument("--batch-size", type=positive, help="default: the nets' recipe's")
    add_subset(p)
    add_seed(p)
    p.add_argument("--snapshot", metavar="DEST",
                   help="train nothing: write DEST/table.md, fig1.png, search.png and "
                   "results.json of the study at --out as it stands (its cells' finished "
                   "trials, of --trials each)")


def fig1(args) -> None:
    from training.experiments.fig1 import fig1 as fig1_
    from training.experiments.fig1 import snapshot

    if args.snapshot is not None:
        if args.out is None:
            raise ValueError("--snapshot needs --out, the study's directory.")
        results = snapshot(args.out, args.snapshot, args.trials, top=args.top)
        done = sum(c["trials"] for c in results["cells"])
        print(f"Wrote {args.snapshot}/table.md, fig1.png, search.png and results.json "
              f"({done} runs finished in {len(results['cells'])} cells)")
        return
    fig1_(args.depths, args.kinds, args.trials, epochs=args.epochs, top=args.top,
          out=args.out, data_dir=args.data_dir, batch_size=args.batch_size,
          max_train_examples=args.max_train_examples,
          max_test_examples=args.max_test_examples, seed=args.seed)


# --- transfer and pretrain ------------------------------------------------------------


def _transfer_arguments(p) -> None:
    add_list(p, "--sizes", item=positive, default=(100, 1000, 4000),
             help="training-set sizes, the first N digits of MNIST's training split")
    add_seeds(p, 3)
    p.add_argument("--steps", type=positive, default=240,
                   help="optimiser steps per run, the same for every size (default 240)")
    add_data_dir(p)
    add_out(p, "output directory", "runs/transfer-TIME", resumable=True)


def transfer(args) -> None:
    from training.experiments.transfer import transfer as transfer_

    transfer_(args.sizes, args.seeds, args.steps, data_dir=args.data_dir, out=args.out)


def _pretrain_arguments(p) -> None:
    from training.experiments.pretrain import WORK_DIR

    p.description = ("Trains the nets whose weights ship with the zoo (or ships a finished "
                     "run) and records each in its family's presets.json, under its tag "
                     "RECIPE.DATA.PRECISION; a new tag becomes the default only if its test "
                     "number beats the default's (or with --default).")
    p.add_argument("--only", nargs="*", help="train only these architectures")
    p.add_argument("--redo", nargs="*", default=[], help="retrain these even if present")
    add_data_dir(p)
    p.add_argument("--work-dir", type=Path, default=WORK_DIR,
                   help=f"the runs' directory, kept for resuming (default {WORK_DIR})")
    p.add_argument("--run", "--language-model", nargs=2, metavar=("NAME", "RUN_DIR"),
                   help="ship a finished run of NAME (an image net, e.g. a `nips-table` run, "
                        "or a language model) instead of training")
    p.add_argument("--float16", action="store_true",
                   help="with --run of a language model: store the weights as float16 (half "
                        "the bytes); their test perplexity is measured again on --corpus")
    p.add_argument("--corpus", metavar="DIR",
                   help="with --float16: the run's corpus (`highway-zoo prepare-text`'s)")
    p.add_argument("--trained-on", metavar="TEXT",
                   help="with --run: the machine the run trained on, for the record "
                        "(default: this one)")
    p.add_argument("--replace", action="store_true",
                   help="with --run: replace the weights NAME already ships under the run's tag "
                        "(RECIPE.DATA.PRECISION), which is refused otherwise")
    p.add_argument("--default", action="store_true",
                   help="with --run: make the run's tag the default (weights='default') even "
                        "if its test number does not beat the current default's")


def pretrain(args) -> None:
    from training.experiments.pretrain import run_from_args

    run_from_args(args)


# --- nips-table -------------------------------------------------------------------


def _nips_table_arguments(p) -> None:
    from training.experiments.nips_tables import TABLES

    p.add_argument("table", type=int, choices=sorted(TABLES),
                   help="1: MNIST, highway_conv16/32_mnist; 2: CIFAR-10, Highway A, B, C; "
                   "3: CIFAR-10, highway_cifar10")
    add_data_dir(p)
    p.add_argument("--models", nargs="+", metavar="NAME", help="only these of the table's nets")
    p.add_argument("--seeds", type=positive, metavar="N",
                   help="seeds per net (default: table 1 three of width 16 and two of width "
                   "32; tables 2 and 3 one)")
    add_epochs(p)
    p.add_argument("--recipe", help="paper (default: each net's released solver), quick or a "
                   "recipe name")
    p.add_argument("--dropout", type=rates, metavar="RATE[,RATE...]",
                   help="the nets' dropout rates in place of the registered ones, as train's "
                   "--dropout (e.g. 0: none); the table names them beside the net")
    p.add_argument("--dtype", type=dtype_policy, metavar="POLICY",
                   help="the Keras dtype policy the nets compute in, as train's --dtype "
                   "(mixed_bfloat16, mixed_float16; default float32); the table names it")
    add_checkpoint_every(p, " each run")
    add_out(p, "output directory", "runs/nips-table-TIME", resumable=True)
    add_in_process(p)
    p.add_argument("--snapshot", metavar="DEST",
                   help="train nothing: write DEST/table.md, accuracy.png and results.json of "
                   "the study at --out as it stands (runs finished and under way)")


def nips_table(args) -> None:
    from training.experiments.nips_tables import nips_table as nips_table_
    from training.experiments.nips_tables import snapshot

    if args.snapshot is not None:
        if args.out is None:
            raise ValueError("--snapshot needs --out, the study's directory.")
        rows = snapshot(args.out, args.snapshot, table=args.table)
        print(f"Wrote {args.snapshot}/table.md, accuracy.png and results.json (nets with an "
              f"epoch done: {len(rows)})")
        return

    nips_table_(args.table, data_dir=args.data_dir, models=args.models, seeds=args.seeds,
                epochs=args.epochs, recipe=args.recipe, dropout=args.dropout,
                dtype=args.dtype, checkpoint_every=args.checkpoint_every, out=args.out,
                isolate=not args.in_process)


COMMANDS = {
    "demo": (_demo_arguments, demo),
    "sweep": (_sweep_arguments, sweep),
    "bias-study": (_bias_study_arguments, bias_study),
    "variants": (_variants_arguments, variants),
    "fig1": (_fig1_arguments, fig1),
    "nips-table": (_nips_table_arguments, nips_table),
    "transfer": (_transfer_arguments, transfer),
    "pretrain": (_pretrain_arguments, pretrain),
}
