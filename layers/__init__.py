"""Highway layers for Keras 3: dense and convolutional highway layers, a batch-normalised
highway block, the character-aware token embedder, and the input preprocessing layers of the
zoo's networks."""

from layers._highway import VARIANTS
from layers.bn_highway_block import BNHighwayBlock
from layers.caffe_imagenet_preprocessing import CaffeImageNetPreprocessing
from layers.char_cnn_embedder import CharCNNEmbedder
from layers.global_contrast_normalization import GlobalContrastNormalization
from layers.highway_conv2d import HighwayConv2D
from layers.highway_dense import HighwayDense
from layers.highway_stack import HighwayStack

__all__ = [
    "VARIANTS",
    "BNHighwayBlock",
    "CaffeImageNetPreprocessing",
    "CharCNNEmbedder",
    "GlobalContrastNormalization",
    "HighwayConv2D",
    "HighwayDense",
    "HighwayStack",
]
