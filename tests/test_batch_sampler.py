"""A batch_sampler on the native path: torch's BatchSampler (fixed size, a shorter last
batch when drop_last=False), a user's own of varying sizes, set_epoch forwarded, and
exact resume mid-epoch in any epoch, against torch's DataLoader over the same dataset
object and an identical batch_sampler, over several epochs."""

import itertools

import pytest
import torch
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler

import fastload
from fastload import ops
from loader_datasets import Squares
from resume_helpers import batches_equal, check_resume_at_every_position

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TRAIN = [ops.RandomResizedCrop(16), ops.RandomHorizontalFlip(), ops.Normalize(MEAN, STD)]
# The engine vs the dataset's own __getitem__ (its plain-PyTorch reference), both float32
# from the same decoded pixels without DCT scaling: only summation order differs.
FLOAT_ATOL = 1e-4
SAMPLES = 7  # one image per class, so that a sample's label is its index
EPOCHS = 3


@pytest.fixture(scope="module")
def folder(make_image_folder):
    return make_image_folder(classes=SAMPLES, per_class=1, size=(40, 52))


def dataset(folder):
    return fastload.ImageFolder(folder, ops=TRAIN, seed=11)


def random_batches(size, drop_last, seed=3):
    return BatchSampler(RandomSampler(range(SAMPLES), generator=torch.Generator().manual_seed(seed)), size, drop_last)


class Varying:
    """A user's batch_sampler of varying batch sizes, reshuffled by set_epoch."""

    def __init__(self, n):
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.epoch)).tolist()
        sizes = itertools.cycle([3, 1, 2] if self.epoch % 2 == 0 else [2, 4])
        while order:
            size = next(sizes)
            yield order[:size]
            order = order[size:]

    def __len__(self):
        return sum(1 for _ in iter(self))


def torch_epochs(ds, batch_sampler, epochs=EPOCHS, set_epoch=False):
    """torch's DataLoader over the same dataset; the dataset draws its augmentation for
    the epoch the fastload loader runs (its automatic epoch count)."""
    loader = torch.utils.data.DataLoader(ds, batch_sampler=batch_sampler)
    out = []
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        if set_epoch:
            batch_sampler.set_epoch(epoch)
        out.append(list(loader))
    return out


def fastload_epochs(loader, epochs=EPOCHS, set_epoch=False):
    out = []
    for epoch in range(epochs):
        if set_epoch:
            loader.set_epoch(epoch)
        out.append(list(loader))
    return out


def assert_same_epochs(ours, theirs):
    assert len(ours) == len(theirs)
    for epoch, (got, want) in enumerate(zip(ours, theirs)):
        assert [b[1].tolist() for b in got] == [b[1].tolist() for b in want], f"epoch {epoch}: other samples"
        for i, (a, b) in enumerate(zip(got, want)):
            torch.testing.assert_close(a[0], b[0], atol=FLOAT_ATOL, rtol=0, msg=f"epoch {epoch} batch {i}")


@pytest.mark.parametrize("drop_last", [False, True])
def test_torch_batch_sampler_runs_native_like_torch(folder, drop_last):
    ds = dataset(folder)
    loader = fastload.DataLoader(ds, batch_sampler=random_batches(3, drop_last), dct_scaling=False)
    assert loader.path.startswith("native: ImageFolder"), loader.path
    assert len(loader) == (2 if drop_last else 3)
    ours = fastload_epochs(loader)
    assert_same_epochs(ours, torch_epochs(dataset(folder), random_batches(3, drop_last)))
    sizes = [len(b[1]) for b in ours[0]]
    assert sizes == ([3, 3] if drop_last else [3, 3, 1])  # the shorter last batch kept
    assert len({tuple(b[1].tolist()) for b in ours[0]} | {tuple(b[1].tolist()) for b in ours[1]}) > 3  # reshuffled


def test_batches_of_varying_size_run_native_and_set_epoch_is_forwarded(folder):
    ds = dataset(folder)
    sampler = Varying(SAMPLES)
    loader = fastload.DataLoader(ds, batch_sampler=sampler, dct_scaling=False)
    assert loader.path.startswith("native: "), loader.path
    ours = fastload_epochs(loader, set_epoch=True)
    assert sampler.epoch == EPOCHS - 1
    assert_same_epochs(ours, torch_epochs(dataset(folder), Varying(SAMPLES), set_epoch=True))
    assert [len(b[1]) for b in ours[0]] == [3, 1, 2, 1] and [len(b[1]) for b in ours[1]] == [2, 4, 1]


def test_set_epoch_reaches_a_wrapped_distributed_sampler(folder):
    def batches():
        return BatchSampler(DistributedSampler(range(SAMPLES), num_replicas=2, rank=1, shuffle=True, seed=5), 2,
                            False)

    loader = fastload.DataLoader(dataset(folder), batch_sampler=batches(), dct_scaling=False)
    assert loader.path.startswith("native: ")
    ours = fastload_epochs(loader, set_epoch=True)
    assert loader.batch_sampler.sampler.epoch == EPOCHS - 1
    reference = batches()
    theirs = []
    ds = dataset(folder)
    for epoch in range(EPOCHS):
        ds.set_epoch(epoch)
        reference.sampler.set_epoch(epoch)
        theirs.append(list(torch.utils.data.DataLoader(ds, batch_sampler=reference)))
    assert_same_epochs(ours, theirs)


def test_resume_at_every_position_of_the_first_epoch(folder):
    def make():
        return fastload.DataLoader(dataset(folder), batch_sampler=random_batches(2, False), dct_scaling=False)

    assert make().path.startswith("native: ")
    check_resume_at_every_position(make)


@pytest.mark.parametrize("path", ["native", "generic"])
def test_resume_in_a_later_epoch_replays_the_samplers_generator(folder, path):
    """Epoch 1 of a RandomSampler with a generator is another permutation than epoch 0's:
    the resumed loader (a new process: a fresh generator) must continue epoch 1, then
    draw epoch 2 as the uninterrupted run did."""
    def make():
        batch_sampler = random_batches(2, False)
        if path == "native":
            return fastload.DataLoader(dataset(folder), batch_sampler=batch_sampler, dct_scaling=False)
        return fastload.DataLoader(Squares(SAMPLES), batch_sampler=batch_sampler)

    reference = fastload_epochs(make())
    for k in range(len(reference[1]) + 1):
        run = make()
        list(run)
        it = iter(run)
        head = list(itertools.islice(it, k))
        state = run.state_dict()
        del it, run
        resumed = make()
        assert resumed.path.split(":")[0] == path
        resumed.load_state_dict(state)
        rest = list(resumed)
        if k == len(reference[1]):
            assert all(map(batches_equal, rest, reference[2])), f"position {k}: not the next epoch"
            continue
        assert all(map(batches_equal, head, reference[1][:k]))
        assert len(rest) == len(reference[1]) - k and all(map(batches_equal, rest, reference[1][k:])), (
            f"position {k}: the resumed epoch differs")
        assert all(map(batches_equal, list(resumed), reference[2])), f"position {k}: the next epoch differs"


def test_a_sampler_that_keeps_its_epoch_names_the_augmentation_epoch(folder):
    """A user's sampler with its own epoch (set by the loop or a framework, not through the
    loader) draws that epoch's random parameters, also in a loader built for that epoch alone
    (what a framework does to resume an epoch)."""
    def batches(epoch):
        sampler = BatchSampler(DistributedSampler(range(SAMPLES), num_replicas=1, rank=0, shuffle=True, seed=1), 3,
                               False)
        sampler.sampler.set_epoch(epoch)
        return sampler

    for epoch in (0, 2):
        loader = fastload.DataLoader(dataset(folder), batch_sampler=batches(epoch), dct_scaling=False)
        reference_dataset = dataset(folder)
        reference_dataset.set_epoch(epoch)
        want = list(torch.utils.data.DataLoader(reference_dataset, batch_sampler=batches(epoch)))
        assert_same_epochs([list(loader)], [want])


def add_one(x):
    return x + 1


@pytest.mark.parametrize("tail_on", ["inline", "processes"])
def test_batches_of_varying_size_on_the_hybrid_path(folder, tail_on):
    """A Python tail after the native prefix (a hybrid runner, in this process or in worker
    processes) takes the batch_sampler's batches as they come too."""
    torchvision = pytest.importorskip("torchvision")
    from torchvision import transforms as T

    ds = torchvision.datasets.ImageFolder(folder, transform=T.Compose([T.Resize((16, 16)), T.ToTensor(),
                                                                       T.Lambda(add_one)]))
    batches = [[3, 1, 0], [5], [2, 4, 6]]
    loader = fastload.DataLoader(ds, batch_sampler=batches, num_workers=2, tail_on=tail_on)
    assert loader.path.startswith("hybrid: "), loader.path
    got = list(loader)
    want = list(torch.utils.data.DataLoader(ds, batch_sampler=batches))
    assert [b[1].tolist() for b in got] == [b[1].tolist() for b in want] == [[3, 1, 0], [5], [2, 4, 6]]
    assert [tuple(b[0].shape) for b in got] == [(3, 3, 16, 16), (1, 3, 16, 16), (3, 3, 16, 16)]
    assert all(float(b[0].min()) >= 1.0 for b in got)  # the tail ran on every sample


def test_a_sampler_epoch_nobody_sets_leaves_the_pass_count(folder):
    """A DistributedSampler whose set_epoch is never called repeats its order, as in torch,
    but the random crops still change every pass (the loader counts passes)."""
    sampler = BatchSampler(DistributedSampler(range(SAMPLES), num_replicas=1, rank=0, shuffle=True, seed=1), 3, False)
    loader = fastload.DataLoader(dataset(folder), batch_sampler=sampler, dct_scaling=False)
    first, second = list(loader), list(loader)
    assert [b[1].tolist() for b in first] == [b[1].tolist() for b in second]
    reference_dataset = dataset(folder)
    reference_dataset.set_epoch(1)
    want = list(torch.utils.data.DataLoader(reference_dataset, batch_sampler=sampler))
    assert_same_epochs([second], [want])
