"""A detection dataset written as users write it for torchvision v2 (PIL image and a
tv_tensors.BoundingBoxes target through one Compose call), for `fastload-bench --dataset`:
torch's DataLoader runs its __getitem__, fastload's traces it (boxes moved by the engine's
draws). `make()` reads an ImageFolder tree at $DETECTION_ROOT and gives each image 4 boxes.

    DETECTION_ROOT=/path/to/images PYTHONPATH=.:benchmarks fastload-bench --dataset detection_user:make
"""
import glob, os
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2


class UserDetection(torch.utils.data.Dataset):
    def __init__(self, annotations, transforms):
        self.annotations, self.transforms = annotations, transforms

    def __len__(self):
        return len(self.annotations)

    def __getitem__(self, i):
        path, size, boxes, labels = self.annotations[i]
        image = Image.open(path).convert("RGB")
        target = {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=size), "labels": labels}
        return self.transforms(image, target)


def annotations_of(paths):
    """(path, (height, width), 4 XYXY boxes inside the image, 4 labels) per image, seeded by
    its position."""
    out = []
    for k, path in enumerate(paths):
        with Image.open(path) as im:
            h, w = im.height, im.width
        g = torch.Generator().manual_seed(k)
        corners = torch.rand(4, 2, 2, generator=g) * torch.tensor([float(w), float(h)])
        boxes = torch.cat([corners.min(1).values, corners.max(1).values], dim=1)
        out.append((path, (h, w), boxes, torch.randint(1, 91, (4,), generator=g)))
    return out


def make(root=None):
    root = root or os.environ["DETECTION_ROOT"]
    annotations = annotations_of(sorted(glob.glob(os.path.join(root, "*", "*.jpg"))))
    return UserDetection(annotations, v2.Compose([
        v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        v2.ClampBoundingBoxes()]))
