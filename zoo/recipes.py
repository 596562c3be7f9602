"""The training recipes of the papers, as pure data attached to each architecture.

`training.recipes` turns these into Keras optimizers and schedules. Learning-rate
boundaries are in epochs here (the Caffe solvers count iterations of batch 100;
the epoch form does not depend on the dataset size). Weight decay is Caffe's:
wd·w added to the gradient, i.e. Keras `L2(wd / 2)` on kernels, biases excluded.
"""

RECIPES = {
    "caffe_mnist_conv": {
        "source": "CODE: mnist_solver.prototxt (spec §2)",
        "optimizer": "sgd",
        "momentum": 0.9,
        "nesterov": True,
        "learning_rate": 0.01,
        "lr_boundaries_epochs": [100, 200],
        "lr_decay": 0.1,
        "batch_size": 100,
        "epochs": 300,
        "weight_decay": 1e-3,
        "classifier_weight_decay_mult": 10,
        "bias_lr_mult": 2,
        "augmentation": "none",
        "seed": 6349390,
    },
    "caffe_cifar": {
        "source": "CODE: cifar10_solver.prototxt = cifar100_solver.prototxt (spec §3)",
        "optimizer": "sgd",
        "momentum": 0.9,
        "nesterov": True,
        "learning_rate": 0.025,
        "lr_boundaries_epochs": [200, 300, 350],
        "lr_decay": 0.1,
        "batch_size": 100,
        "epochs": 400,
        "weight_decay": 1e-3,
        "classifier_weight_decay_mult": 10,
        "bias_lr_mult": 2,
        "augmentation": "zero-pad 8 px, random 32x32 crop, random horizontal flip",
        "seed": 634253,
    },
    "adam_fc": {
        "source": (
            "seed write-up 003 (the paper's FC recipe, SGD with momentum and an "
            "exponentially decaying rate found by random search, was never published)"
        ),
        "optimizer": "adam",
        "learning_rate": 5e-3,
        "global_clipnorm": 5.0,
        "batch_size": 128,
        "epochs": 12,
        "weight_decay": 0.0,
        "augmentation": "none",
        "seed": 0,
    },
}
