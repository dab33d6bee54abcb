"""fastload.DataLoader. (stub: being written)"""

from torch.utils.data import DataLoader  # noqa: F401
