"""The training recipes of the papers, as pure data attached to each architecture.

Each registered architecture names its paper recipe (`zoo.describe(name)["recipe"]`);
`QUICK_RECIPES` maps every paper recipe to a short one for checking a set-up on a CPU.
`training.recipes` validates these dicts, turns them into Keras optimizers and schedules,
and lists their fields (`training.recipes.FIELDS`, one CLI flag each).

Every recipe has the same training fields:

- `optimizer` ("sgd" or "adam"), `learning_rate` (the base rate; never scaled with the
  number of replicas), `momentum` and `nesterov` (SGD only, else None);
- `lr_boundaries_epochs` and `lr_decay`: Caffe's "multistep" policy, the rate times
  `lr_decay` at each boundary. Boundaries are in epochs here (the Caffe solvers count
  iterations of batch 100; epochs do not depend on the dataset size) and become
  iteration counts of the global batch when training starts;
- `batch_size`: the GLOBAL batch, split over the replicas (Caffe's batch 100 is global);
- `epochs`;
- `weight_decay` and `classifier_weight_decay_mult`: Caffe's decay, wd·w added to the
  gradient, i.e. Keras `L2(wd / 2)` on every kernel, biases excluded, and
  `L2(wd / 2 * mult)` on the classifier kernel (layer "logits");
- `bias_lr_mult`: Caffe's `lr_mult` of every bias (SGD only: under Adam a gradient
  scale changes nothing, so it must stay 1);
- `global_clipnorm`: clip the global gradient norm, or None;
- `augmentation`: "none", or "pad_crop_flip" (pad by 8 pixels with each image's mean,
  which is zero after the model's GCN, random 32x32 crop and horizontal flip in training;
  nothing at test time: `training.data.augment`).

Recipes of today may also set (the others leave them at these defaults):

- `lr_schedule`: "multistep" (above) or "cosine": linear warm-up from 0 over
  `warmup_epochs`, then a cosine decay to 0 at the last step;
- `label_smoothing` (0): the target's mass on the other classes;
- `ema_momentum` (None): keep a moving average of the weights, evaluated every epoch and
  saved at the end (SGD only).

Besides these, `source` says where a recipe comes from, `authors_seed` records the Caffe
solver's `random_seed` (not used: `--seed` seeds a run), and quick recipes say in
`purpose` what they are for and in `paper_recipe` which recipe they shorten.
"""

RECIPES = {
    "caffe_mnist_conv": {
        "source": "CODE: mnist_solver.prototxt (spec §2)",
        "optimizer": "sgd",
        "momentum": 0.9,
        "nesterov": True,
        "learning_rate": 0.01,
        "lr_boundaries_epochs": [100, 200],  # iterations 60k, 120k at batch 100 on 60k images
        "lr_decay": 0.1,
        "batch_size": 100,
        "epochs": 300,  # max_iter 180k
        "weight_decay": 1e-3,
        "classifier_weight_decay_mult": 10.0,
        "bias_lr_mult": 2.0,
        "global_clipnorm": None,
        "augmentation": "none",
        "authors_seed": 6349390,
    },
    "caffe_cifar": {
        "source": "CODE: cifar10_solver.prototxt = cifar100_solver.prototxt (spec §3)",
        "optimizer": "sgd",
        "momentum": 0.9,
        "nesterov": True,
        "learning_rate": 0.025,
        # iterations 100k, 150k, 175k at batch 100 on 50k images
        "lr_boundaries_epochs": [200, 300, 350],
        "lr_decay": 0.1,
        "batch_size": 100,
        "epochs": 400,  # max_iter 200k
        "weight_decay": 1e-3,
        "classifier_weight_decay_mult": 10.0,
        "bias_lr_mult": 2.0,
        "global_clipnorm": None,
        # Zero-padding by 8 after GCN (HWN-README), random 32x32 crops and mirroring in
        # the Caffe data layer; the per-pixel mean image is not subtracted (README).
        "augmentation": "pad_crop_flip",
        "authors_seed": 634253,  # CIFAR-100: 3785677
    },
    "adam_fc": {
        "source": (
            "seed write-up 003 (the paper's FC recipe, SGD with momentum and an "
            "exponentially decaying rate found by random search, was never published)"
        ),
        "optimizer": "adam",
        "momentum": None,
        "nesterov": None,
        "learning_rate": 5e-3,
        "lr_boundaries_epochs": [],
        "lr_decay": None,
        "batch_size": 128,
        "epochs": 12,
        "weight_decay": 0.0,
        "classifier_weight_decay_mult": 1.0,
        "bias_lr_mult": 1.0,
        "global_clipnorm": 5.0,
        "augmentation": "none",
        "authors_seed": None,
    },
}

RECIPES["resnet_imagenet"] = {
    "source": (
        "He et al. 2015 §3.4, the recipe Greff et al. 2017 §5.1 used for all three nets: SGD "
        "with momentum 0.9, weight decay 1e-4, batch 256, lr 0.1 divided by 10 'when the error "
        "plateaus' (epochs 30, 60 and 90 here, the usual fixed version), up to 60e4 "
        "iterations (120 epochs of 1.28M images), scale and aspect augmentation and flips "
        "(random-resized crops here)"
    ),
    "optimizer": "sgd",
    "momentum": 0.9,
    "nesterov": False,
    "learning_rate": 0.1,
    "lr_boundaries_epochs": [30, 60, 90],
    "lr_decay": 0.1,
    "batch_size": 256,
    "epochs": 120,
    "weight_decay": 1e-4,
    "classifier_weight_decay_mult": 1.0,
    "bias_lr_mult": 1.0,
    "global_clipnorm": None,
    "augmentation": "random_resized_crop_flip",
    "authors_seed": None,
}

RECIPES["sgd_cifar_bn"] = {
    "source": (
        "CODE: flukeskywalker/highway-resnet-comparison trainer.py (after Idelbayev's "
        "ResNet-CIFAR trainer): SGD momentum 0.9, weight decay 1e-4, lr 0.1, batch 128, "
        "200 epochs, /10 at epochs 100 and 150, 4-pixel pad-and-crop and flips"
    ),
    "optimizer": "sgd",
    "momentum": 0.9,
    "nesterov": False,
    "learning_rate": 0.1,
    "lr_boundaries_epochs": [100, 150],
    "lr_decay": 0.1,
    "batch_size": 128,
    "epochs": 200,
    "weight_decay": 1e-4,
    "classifier_weight_decay_mult": 1.0,
    "bias_lr_mult": 1.0,
    "global_clipnorm": None,
    "augmentation": "pad4_crop_flip",
    "authors_seed": None,
}

_QUICK_PURPOSE = (
    "Checks that a set-up trains end to end (the loss falls within the first epoch, the "
    "run directory is complete) in minutes on a CPU on MNIST-sized data. Not for "
    "accuracy: no schedule, no weight decay, no augmentation, few epochs."
)

# What every quick recipe shares: Adam, clipped, no schedule, decay or augmentation.
_QUICK = {
    "optimizer": "adam",
    "momentum": None,
    "nesterov": None,
    "lr_boundaries_epochs": [],
    "lr_decay": None,
    "weight_decay": 0.0,
    "classifier_weight_decay_mult": 1.0,
    "bias_lr_mult": 1.0,
    "global_clipnorm": 5.0,
    "augmentation": "none",
    "authors_seed": None,
}

RECIPES.update({
    "caffe_mnist_conv_quick": {
        **_QUICK,
        "source": "quick version of caffe_mnist_conv",
        "paper_recipe": "caffe_mnist_conv",
        "purpose": _QUICK_PURPOSE + " Measured: highway_conv16_mnist reaches 0.91 test "
        "accuracy on the 4,000-digit offline MNIST sample in its 3 epochs (10 s on 2 cores).",
        "learning_rate": 3e-3,
        "batch_size": 100,
        "epochs": 3,
    },
    "caffe_cifar_quick": {
        **_QUICK,
        "source": "quick version of caffe_cifar",
        "paper_recipe": "caffe_cifar",
        "purpose": _QUICK_PURPOSE + " Not measured (no CIFAR here). The 19-layer CIFAR nets "
        "need roughly 20 minutes per epoch of full CIFAR on 2 CPU cores: a GPU run, or a "
        "smaller dataset.",
        "learning_rate": 1e-3,
        "batch_size": 100,
        "epochs": 2,
    },
    "resnet_imagenet_quick": {
        **_QUICK,
        "source": "quick version of resnet_imagenet",
        "paper_recipe": "resnet_imagenet",
        "purpose": _QUICK_PURPOSE + " Not measured (no ImageNet here): a setup check on a "
        "few batches of your own data.",
        "learning_rate": 1e-3,
        "batch_size": 32,
        "epochs": 1,
    },
    "sgd_cifar_bn_quick": {
        **_QUICK,
        "source": "quick version of sgd_cifar_bn",
        "paper_recipe": "sgd_cifar_bn",
        "purpose": _QUICK_PURPOSE + " Not measured (no CIFAR here).",
        "learning_rate": 1e-3,
        "batch_size": 128,
        "epochs": 2,
    },
    "adam_fc_quick": {
        **RECIPES["adam_fc"],
        "source": "quick version of adam_fc",
        "paper_recipe": "adam_fc",
        "purpose": _QUICK_PURPOSE + " Same optimiser as adam_fc, 3 epochs instead of 12.",
        "epochs": 3,
    },
})

# The shipped conv weights' recipe. The paper's solver (SGD 0.01, weight decay 1e-3) with the
# nets' heavy dropout (0.2 to 0.5) needs its 300 epochs: shortened to 30 it left
# highway_conv16_fashion_mnist at 0.83 test accuracy after 11 epochs, rising slowly. Adam at
# the quick recipe's rate trains these nets several times faster per epoch of data.
RECIPES["caffe_mnist_conv_adam"] = {
    **_QUICK,
    "source": "Adam at caffe_mnist_conv_quick's rate (3e-3, global-norm clip 5, batch 100), "
    "40 epochs with the rate /10 at epochs 25 and 35; no weight decay (the nets' dropout "
    "regularises)",
    "paper_recipe": "caffe_mnist_conv",
    "purpose": "Trains the shipped MNIST-family conv weights on a CPU until the test accuracy "
    "stops improving (its preset's weights record keeps it per epoch).",
    "learning_rate": 3e-3,
    "batch_size": 100,
    "lr_boundaries_epochs": [25, 35],
    "lr_decay": 0.1,
    "epochs": 40,
}

# The CIFAR weights that ship while no GPU has trained the paper's 400 epochs (58-96 hours a
# 19-layer net on this project's 2-core CPU): the released solver, its schedule cut to a tenth.
RECIPES["caffe_cifar_tenth"] = {
    **RECIPES["caffe_cifar"],
    "source": "the released CIFAR solver (caffe_cifar) at a tenth of its schedule: 40 epochs, "
    "the rate /10 at epochs 20, 30 and 35 (the paper's 400, and 200, 300, 350)",
    "paper_recipe": "caffe_cifar",
    "purpose": "Trains CIFAR-10 weights of the 19-layer nets on a CPU, where the paper's "
    "400 epochs do not fit; their accuracy is this schedule's, not the paper's.",
    "lr_boundaries_epochs": [20, 30, 35],
    "epochs": 40,
}

# A recipe of today for the same nets, unchanged (no batch normalization): SGD with
# Nesterov momentum, a linear warm-up and a cosine decay to zero (Loshchilov & Hutter 2017;
# Goyal et al. 2017's warm-up), label smoothing 0.1 (Szegedy et al. 2016), a moving average
# of the weights (Polyak averaging, as timm's ModelEmaV3), the 4-pixel crops and mirrors of
# the ResNet and Wide-ResNet CIFAR recipes, the weight decay of those recipes (5e-4), and no
# Caffe multipliers. 100 epochs: Highway B's and the 19-layer net's 10 hours on 2 CPU cores
# in bfloat16 (`--dtype mixed_bfloat16`); `--epochs` fits another net to that budget.
RECIPES["cosine_cifar"] = {
    "source": "this project: the CIFAR recipes of the 2016-2024 literature (warm-up and cosine "
    "decay, label smoothing, a weight average) on the highway papers' nets, unchanged",
    "purpose": "Trains the CIFAR highway nets close to the paper's accuracy within 10 hours "
    "of a 2-core CPU, where the paper's 400 epochs take 58-96 hours.",
    "optimizer": "sgd",
    "momentum": 0.9,
    "nesterov": True,
    "learning_rate": 0.05,
    "lr_schedule": "cosine",
    "warmup_epochs": 5,
    "lr_boundaries_epochs": [],
    "lr_decay": None,
    "batch_size": 128,
    "epochs": 100,
    "weight_decay": 5e-4,
    "classifier_weight_decay_mult": 1.0,
    "bias_lr_mult": 1.0,
    "global_clipnorm": None,
    "augmentation": "pad4_crop_flip",
    "label_smoothing": 0.1,
    "ema_momentum": 0.999,
    "authors_seed": None,
}

# Kim et al.'s language-model recipe (yoonkim/lstm-char-cnn main.lua defaults): plain SGD at
# 1.0, halved after an epoch whose validation perplexity improved by less than 1, global norm 5,
# batch 20 of 35 contiguous steps (training.language_model), 25 epochs. Dropout 0.5 and the
# uniform ±0.05 initialisation belong to the architecture (zoo.char_lm).
RECIPES["kim_char_lm"] = {
    "source": "CODE: yoonkim/lstm-char-cnn main.lua (-learning_rate 1 -learning_rate_decay 0.5 "
    "-decay_when 1 -max_grad_norm 5 -batch_size 20 -seq_length 35 -max_epochs 25)",
    "optimizer": "sgd",
    "momentum": 0.0,
    "nesterov": False,
    "learning_rate": 1.0,
    "lr_boundaries_epochs": [],
    "lr_decay": None,
    "lr_plateau_decay": 0.5,
    "lr_plateau_min_improvement": 1.0,
    "batch_size": 20,
    "bptt_steps": 35,
    "epochs": 25,
    "weight_decay": 0.0,
    "classifier_weight_decay_mult": 1.0,
    "bias_lr_mult": 1.0,
    "global_clipnorm": 5.0,
    "augmentation": "none",
    "authors_seed": 3435,
}
RECIPES["kim_char_lm_quick"] = {
    **RECIPES["kim_char_lm"],
    "source": "quick version of kim_char_lm",
    "paper_recipe": "kim_char_lm",
    "purpose": "Checks that a language model trains end to end (validation perplexity falls "
    "in the first epochs) on a small text in minutes on a CPU: the paper's optimiser, "
    "3 epochs.",
    "epochs": 3,
}

# Paper recipe -> its quick version (`highway-zoo train NAME --recipe quick`).
QUICK_RECIPES = {
    "caffe_mnist_conv": "caffe_mnist_conv_quick",
    "caffe_cifar": "caffe_cifar_quick",
    "adam_fc": "adam_fc_quick",
    "resnet_imagenet": "resnet_imagenet_quick",
    "sgd_cifar_bn": "sgd_cifar_bn_quick",
    "kim_char_lm": "kim_char_lm_quick",
}
