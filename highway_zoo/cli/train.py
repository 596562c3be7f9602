"""`highway-zoo train`: one zoo network, its recipe, a run directory that resumes."""

from __future__ import annotations

import json

from highway_zoo.cli.args import (
    add_checkpoint_every,
    add_data_dir,
    add_dataset,
    add_seed,
    dtype_policy,
    finite,
    positive,
    rates,
)

# Flags that become architecture overrides (dest -> type).
OVERRIDE_FLAGS = {"depth": positive, "width": positive, "transform_bias": finite,
                  "activation": str, "variant": str, "classes": positive, "dropout": rates,
                  "highway_layers": positive, "dtype": dtype_policy,
                  "first_conv_stddev": finite, "gcn_scale": finite}
_OVERRIDE_HELP = {
    "depth": "FC nets: layers in all, the stem counted (depth N: a stem layer and N-1 "
             "highway layers, as the papers count)",
    "width": "units per layer (FC nets)",
    "transform_bias": "initial transform-gate bias b_T",
    "activation": "the highway layers' activation (e.g. relu, tanh)",
    "variant": "coupled, full, c_only, t_only, residual or plain (Greff et al. 2017), or a "
               "gated skip: rezero, layerscale, gru_gate, laurel_rw, laurel_lr",
    "classes": "number of classes (a fresh classifier)",
    "dropout": "conv nets: every dropout layer's rate, or one per layer (MNIST: input and "
               "after stages 1-3, 0.2,0.3,0.4,0.5 as released; CIFAR: input, after each "
               "pool and before the classifier, 0.2 each); language models: one rate",
    "highway_layers": "language models: highway layers after the character CNN",
    "first_conv_stddev": "CIFAR nets: start the first conv N(0, STDDEV^2) instead of "
                         "He-normal (1.0: the released 19-layer net's, by Caffe's filler)",
    "gcn_scale": "CIFAR nets: the standard deviation the model's GCN gives each image "
                 "(default 1)",
    "dtype": "the Keras dtype policy the net computes in: float32 (default), mixed_bfloat16 "
             "(bfloat16 arithmetic on float32 variables) or mixed_float16 (GPUs; Keras scales "
             "the loss)",
}


def add_override_flags(p) -> None:
    group = p.add_argument_group("architecture overrides (what the family allows: "
                                 "`highway-zoo describe NAME` lists them)")
    for name, kind in OVERRIDE_FLAGS.items():
        group.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None,
                           help=_OVERRIDE_HELP[name])
    group.add_argument("--pool-padding", action="store_const", const=True, default=None,
                       help="language models: the character CNN's max over every window of "
                       "the padded word, as Kim et al.'s code (default: inside the word)")
    group.add_argument("--stacked", action="store_const", const=True, default=None,
                       help="highway FC nets: keep the highway layers as one HighwayStack "
                       "(stacked weights, one scan): start-up independent of depth")


def overrides(args) -> dict:
    names = (*OVERRIDE_FLAGS, "stacked", "pool_padding")
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def _arguments(p) -> None:
    from training.recipes import add_recipe_flags
    from training.runtime.distribute import STRATEGIES

    p.description = (
        "Trains a zoo network with its paper recipe (or --recipe quick), writing a run "
        "directory that resumes after an interruption: run the same command again. "
        "--batch-size is the GLOBAL batch, split over all replicas; the learning rate is not "
        "scaled with the number of replicas.")
    p.add_argument("name", help="architecture name (highway-zoo list)")
    add_dataset(p)
    add_data_dir(p)
    p.add_argument("--corpus", metavar="DIR", help="language models (lstm_char_*): a text in "
                   "Mikolov's format, train.txt / valid.txt / test.txt or ptb.*.txt "
                   "(`highway-zoo prepare-text`)")
    p.add_argument("--weights", metavar="RUN_DIR", help="language models: fine-tune a finished "
                   "run of the same architecture on --corpus, read with the run's vocabulary")
    p.add_argument("--max-train-tokens", type=positive, metavar="N",
                   help="language models: train on the first N tokens of train.txt only")
    p.add_argument("--out", metavar="DIR", help="run directory: new, empty, or an interrupted "
                   "run of the same configuration, which is resumed (default runs/NAME-TIME)")
    add_seed(p)
    p.add_argument("--recipe", default="paper", help="paper (default: the architecture's "
                   "recipe), quick (a few minutes on a CPU) or a recipe name")
    add_checkpoint_every(p)
    p.add_argument("--no-gate-summaries", dest="gate_summaries", action="store_false",
                   help="do not write the transform gates' TensorBoard summaries and "
                   "gates.json each epoch")
    p.add_argument("--strategy", choices=STRATEGIES, default="default",
                   help="default (one device), mirrored (TensorFlow: all local GPUs, or the "
                   "logical CPU devices of --cpu-devices), multiworker (TensorFlow: "
                   "TF_CONFIG) or data_parallel (JAX: keras.distribution.DataParallel over "
                   "every device; several processes with KERAS_DISTRIBUTION_JOB_ADDRESSES, "
                   "_NUM_PROCESSES and _PROCESS_ID); see training/runtime/distribute/")
    p.add_argument("--cpu-devices", type=positive, metavar="N",
                   help="split the host CPU into N logical devices (for --strategy mirrored "
                   "or data_parallel without GPUs)")
    p.add_argument("--verbose", choices=["auto", "0", "1", "2"], default="auto",
                   help="Keras progress: 1 a bar, 2 one line per epoch, 0 none (default auto)")
    add_recipe_flags(p)
    add_override_flags(p)


def train(args) -> None:
    from training.recipes import recipe_overrides
    from training.runtime import distribute

    if args.cpu_devices is not None:
        refusal = distribute.cpu_devices_need_a_strategy(args.strategy)
        if refusal is not None:
            raise refusal
        distribute.set_cpu_devices(args.cpu_devices)  # before TensorFlow or JAX starts
    import zoo

    if zoo.describe(args.name)["family"] == "char_lm":
        print(json.dumps(_train_language_model(args), indent=2))
        return
    if args.corpus is not None or args.max_train_tokens is not None \
            or args.weights is not None:
        raise ValueError(f"--corpus, --max-train-tokens and --weights are for the language "
                         f"models; {args.name} trains on --dataset.")
    from training import train as train_

    metrics = train_(
        args.name, dataset=args.dataset, data_dir=args.data_dir, out=args.out,
        seed=args.seed, recipe=args.recipe, recipe_overrides=recipe_overrides(args),
        strategy=args.strategy, checkpoint_every=args.checkpoint_every,
        gate_summaries=args.gate_summaries,
        verbose=args.verbose if args.verbose == "auto" else int(args.verbose),
        **overrides(args),
    )
    print(json.dumps(metrics, indent=2))


def _train_language_model(args) -> dict:
    from training.language_model import train_lm
    from training.recipes import recipe_overrides

    if args.corpus is None:
        raise ValueError(f"{args.name} is a language model: give it a text with --corpus DIR "
                         "(train.txt, valid.txt, test.txt; `highway-zoo prepare-text "
                         "shakespeare --out DIR` makes one).")
    if args.dataset is not None or args.strategy != "default":
        raise ValueError("--dataset and --strategy are for the image networks; a language "
                         "model takes --corpus and trains on one device.")
    lm_overrides = overrides(args)
    if isinstance(lm_overrides.get("dropout"), (list, tuple)):
        if len(lm_overrides["dropout"]) != 1:
            raise ValueError("--dropout: a language model takes one rate.")
        lm_overrides["dropout"] = lm_overrides["dropout"][0]
    return train_lm(args.name, args.corpus, out=args.out, seed=args.seed, recipe=args.recipe,
                    recipe_overrides=recipe_overrides(args),
                    max_train_tokens=args.max_train_tokens, weights=args.weights,
                    checkpoint_every=args.checkpoint_every, gate_summaries=args.gate_summaries,
                    verbose=args.verbose if args.verbose == "auto" else int(args.verbose),
                    **lm_overrides)


COMMANDS = {"train": (_arguments, train)}
