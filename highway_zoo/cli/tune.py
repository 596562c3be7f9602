"""`highway-zoo tune`: the NIPS 2015 random search with KerasTuner (training/tuning/)."""

from __future__ import annotations

from highway_zoo.cli.args import (
    add_data_dir,
    add_dataset,
    add_list,
    add_seed,
    add_subset,
    finite,
    positive,
)


def _range(args, flag: str) -> tuple[float, float]:
    values = getattr(args, flag.lstrip("-").replace("-", "_"))
    if len(values) != 2:
        raise ValueError(f"{flag} takes two numbers LOW,HIGH, e.g. {flag}=-6,-1. "
                         f"Received: {','.join(f'{v:g}' for v in values)}")
    return values[0], values[1]


def _arguments(p) -> None:
    from training.runtime.distribute import STRATEGIES
    from training.tuning.space import ACTIVATIONS, SearchSpace
    from training.tuning.tuner import PRODUCED_METRICS, TUNERS

    defaults = SearchSpace()
    p.description = (
        "Searches learning rate, momentum, learning-rate decay, activation and (highway nets) "
        "the transform-gate bias, training with SGD + momentum. Resumes an interrupted search "
        "in --out when run again; distributed with KERASTUNER_TUNER_ID, KERASTUNER_ORACLE_IP "
        "and KERASTUNER_ORACLE_PORT (see training/tuning/tuner.py).")
    p.add_argument("name", help="architecture name (highway-zoo list)")
    p.add_argument("--tuner", choices=TUNERS, default="random", help="default random")
    p.add_argument("--max-trials", type=positive, default=10, help="default 10")
    p.add_argument("--epochs", type=positive, default=5, help="epochs per trial (default 5)")
    p.add_argument("--objective", choices=PRODUCED_METRICS, default="val_accuracy",
                   help="what the search optimises ('val_' = on the test split; default "
                   "val_accuracy)")
    p.add_argument("--out", metavar="DIR", help="search directory; an interrupted search "
                   "there resumes (default runs/tune-NAME-TIME)")
    p.add_argument("--overwrite", action="store_true",
                   help="delete an existing search in --out and start afresh")
    add_dataset(p)
    add_data_dir(p)
    p.add_argument("--batch-size", type=positive, help="global batch (default: the recipe's)")
    add_subset(p)
    add_seed(p)
    for flag, value, what in (
        ("--lr-range", defaults.learning_rate, "learning rate, log-uniform"),
        ("--momentum-range", defaults.momentum, "SGD momentum, uniform"),
        ("--decay-range", defaults.lr_decay, "learning-rate decay factor per epoch"),
        ("--transform-bias-range", defaults.transform_bias, "transform-gate bias b_T, uniform"),
    ):
        add_list(p, flag, item=finite, default=value, metavar="LOW,HIGH", help=what)
    add_list(p, "--activations", choices=ACTIVATIONS, default=defaults.activations,
             help="the activations searched")
    # KerasTuner takes a tf.distribute strategy: not multiworker's TF_CONFIG, nor JAX's.
    p.add_argument("--strategy", choices=[s for s in STRATEGIES
                                          if s not in ("multiworker", "data_parallel")],
                   default="default", help="train each trial with this tf.distribute strategy "
                   "(default: one device)")
    p.add_argument("--cpu-devices", type=positive, metavar="N",
                   help="split the host CPU into N logical devices (for --strategy mirrored)")
    p.add_argument("--verbose", type=int, default=0, choices=[0, 1, 2],
                   help="Keras progress per trial (default 0: one line per trial)")
    group = p.add_argument_group("fixed architecture overrides")
    group.add_argument("--depth", type=positive, help="FC nets: layers in all, the stem "
                       "counted (depth N: a stem layer and N-1 highway layers)")
    group.add_argument("--width", type=positive, help="units per layer (FC nets)")
    group.add_argument("--variant", help="the highway variant (Greff et al. 2017)")


def tune(args) -> None:
    from training.runtime import distribute
    from training.tuning import SearchSpace, search

    if args.cpu_devices is not None:
        if distribute.backend() != "tensorflow":  # the devices are for mirrored alone here
            raise distribute.tf_distribute_only("--cpu-devices (logical CPU devices for "
                                                "--strategy mirrored)")
        distribute.set_cpu_devices(args.cpu_devices)  # before anything starts TensorFlow
    space = SearchSpace(
        learning_rate=_range(args, "--lr-range"), momentum=_range(args, "--momentum-range"),
        lr_decay=_range(args, "--decay-range"), activations=tuple(args.activations),
        transform_bias=_range(args, "--transform-bias-range"),
    )
    overrides = {k: getattr(args, k) for k in ("depth", "width", "variant")
                 if getattr(args, k) is not None}
    search(args.name, space=space, tuner=args.tuner, max_trials=args.max_trials,
           epochs=args.epochs, objective=args.objective, out=args.out, dataset=args.dataset,
           data_dir=args.data_dir, batch_size=args.batch_size,
           max_train_examples=args.max_train_examples,
           max_test_examples=args.max_test_examples, seed=args.seed, strategy=args.strategy,
           overwrite=args.overwrite, verbose=args.verbose, **overrides)


COMMANDS = {"tune": (_arguments, tune)}
