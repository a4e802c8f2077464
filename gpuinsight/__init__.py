"""gpuinsight: GPU cost and utilization analytics for Kubernetes."""

from gpuinsight.api import GpuInsight, open
from gpuinsight.config import Config

__version__ = "0.1.0"
__all__ = ["Config", "GpuInsight", "open", "__version__"]
