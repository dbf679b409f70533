"""The truth table's trainers: CPU torch loops with hand timers (tests/helpers/truth.py), each
a few seconds long. The six loop shapes of issue 38, two whose host part is two pure-Python
functions (the stack sampler's checks), and trainers shaped as minGPT's Trainer.run(), Hugging
Face's Trainer.train() and Lightning's fit loop with automatic optimization.

Each names its slow code in a function of its own, written without comprehensions (on
Python 3.11 a comprehension is a function of its own, which the sampler would name)."""

from __future__ import annotations

import textwrap

SHAPE_STEPS = 80

HEAD = """
import sys, time
import torch
from torch import nn
from truth_timers import step_done, timed, timed_iter

torch.manual_seed(0)
torch.set_num_threads(1)
STEPS = {steps}
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(4096, 33)


def get_batch():
    time.sleep(0.025)  # a slow read
    rows = data[torch.randint(len(data), (16,))]
    return rows[:, :32], rows[:, 32:]


def loss_of(x, y):
    return nn.functional.mse_loss(model(x), y)


def train_step(x, y):
    with timed("compute"):
        loss = loss_of(x, y)
        loss.backward()
        opt.step()
    step_done()
    opt.zero_grad(set_to_none=True)
"""


def host_between_forward_and_backward(host: str) -> str:
    """A loop of STEPS with `host` (timed lines) between forward and backward, where nanoGPT
    fetches its next batch."""
    return f"""
for it in range(STEPS):
    with timed("compute"):
        loss = loss_of(X, Y)
{textwrap.indent(textwrap.dedent(host).strip(), "    ")}
    with timed("compute"):
        loss.backward()
        opt.step()
    step_done()
    opt.zero_grad(set_to_none=True)
"""


SHAPES = {
    # nanoGPT: the next batch is fetched between forward and backward: host time
    "nanogpt": "X, Y = get_batch()\n" + host_between_forward_and_backward("""
        with timed("host", get_batch):
            X, Y = get_batch()
    """),
    "fetch_at_top": """
for it in range(STEPS):
    with timed("input", get_batch):
        X, Y = get_batch()
    train_step(X, Y)
""",
    "pinned": """
try:
    torch.zeros(1).pin_memory()
except RuntimeError as exc:
    print("pin_memory() needs an accelerator:", str(exc).splitlines()[0], file=sys.stderr)
    sys.exit(3)
for it in range(STEPS):
    with timed("input", get_batch):
        X, Y = get_batch()
    with timed("input"):
        X = X.pin_memory().to("cpu", non_blocking=True)
        Y = Y.pin_memory().to("cpu", non_blocking=True)
    train_step(X, Y)
""",
    "slow_collate": """
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data._utils.collate import default_collate


def slow_collate(batch):
    with timed("input"):
        time.sleep(0.025)  # a main-thread collate doing real work
        return default_collate(batch)


loader = DataLoader(TensorDataset(data[:, :32], data[:, 32:]), batch_size=16,
                    collate_fn=slow_collate, num_workers=0)
for it, (X, Y) in enumerate(timed_iter(loader)):
    if it == STEPS:
        break
    train_step(X, Y)
""",
    "logging": """
from torch.utils.data import DataLoader, TensorDataset

history = []


def log_metrics(loss, step):
    with timed("host"):
        value = loss.item()
        norms = []
        for p in model.parameters():
            norms.append(f"{p.grad.norm().item():.3f}")
        history.append(f"step {step} loss {value:.4f} " + " ".join(norms))
        time.sleep(0.025)  # the write of a heavy logger
        print(history[-1][:40], file=sys.stderr if step % 10 else sys.stdout)


loader = DataLoader(TensorDataset(data[:, :32], data[:, 32:]), batch_size=16)
for it, (X, Y) in enumerate(timed_iter(loader)):
    if it == STEPS:
        break
    with timed("compute"):
        loss = loss_of(X, Y)
        loss.backward()
    log_metrics(loss, it)
    with timed("compute"):
        opt.step()
    step_done()
    opt.zero_grad(set_to_none=True)
""",
    "lbfgs": """
opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
for it in range(STEPS):
    with timed("input", get_batch):
        X, Y = get_batch()

    def closure():
        opt.zero_grad()
        loss = loss_of(X, Y)
        loss.backward()
        return loss

    with timed("compute"):
        opt.step(closure)
    step_done()
""",
}

# A host part of pure-Python functions, for the stack sampler's checks
HOST_FUNCTIONS = """
X, Y = data[:16, :32], data[:16, 32:]
square = torch.randn(200, 200)
text = "the quick brown fox jumps over the lazy dog " * 4
clock = time.perf_counter_ns


def tokenize(ms):
    end = clock() + ms * 1_000_000
    tokens = 0
    while clock() < end:  # pure Python: holds the GIL throughout
        for word in text.split():
            tokens += len(word) % 7
    return tokens


def augment(ms):
    end = clock() + ms * 1_000_000
    while clock() < end:
        square @ square  # torch lets go of the GIL in each product


def log_metrics(ms):
    end = clock() + ms * 1_000_000
    lines = []
    while clock() < end:  # pure Python too
        lines.append(f"step {len(lines)} loss {len(lines) / 7:.4f}")
    return len(lines)
"""


def host_functions_trainer(steps: int, *calls: str) -> str:
    """A trainer of `steps` whose host part, between forward and backward, is `calls` of
    HOST_FUNCTIONS ("tokenize(6)"), each timed as its function's."""
    timed_calls = "".join(f'with timed("host", {call.partition("(")[0]}):\n    {call}\n'
                          for call in calls)
    return (HEAD.format(steps=steps) + HOST_FUNCTIONS
            + host_between_forward_and_backward(timed_calls))


# minGPT's Trainer.run() (karpathy/minGPT mingpt/trainer.py) on a CharDataset (projects/chargpt)
MINGPT = """
import math, random, sys
from collections import defaultdict
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset
from truth_timers import step_done, timed

torch.manual_seed(0)
torch.set_num_threads(1)
rng = random.Random(0)
TEXT = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz .,;\\n") for _ in range(20000))


class CharDataset(Dataset):
    def __init__(self, data, block_size):
        chars = sorted(set(data))
        self.stoi = dict(zip(chars, range(len(chars))))
        self.vocab_size = len(chars)
        self.block_size = block_size
        self.data = data

    def __len__(self):
        return len(self.data) - self.block_size

    def __getitem__(self, idx):
        with timed("input"):
            chunk = self.data[idx:idx + self.block_size + 1]
            dix = []
            for s in chunk:  # minGPT encodes with a comprehension: the same dict lookups
                dix.append(self.stoi[s])
            x = torch.tensor(dix[:-1], dtype=torch.long)
            y = torch.tensor(dix[1:], dtype=torch.long)
        return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        mask = torch.tril(torch.ones(block_size, block_size))
        self.register_buffer("bias", mask.view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer=1, n_head=2, n_embd=16):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def configure_optimizers(self, config):
        return torch.optim.AdamW(self.parameters(), lr=config.learning_rate, betas=(0.9, 0.95))

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        return logits, loss


class CN:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class Trainer:
    def __init__(self, config, model, train_dataset):
        self.config = config
        self.model = model
        self.train_dataset = train_dataset
        self.callbacks = defaultdict(list)
        self.device = "cpu"
        self.iter_num = 0

    def add_callback(self, onevent, callback):
        self.callbacks[onevent].append(callback)

    def trigger_callbacks(self, onevent):
        for callback in self.callbacks.get(onevent, []):
            callback(self)

    def run(self):
        model, config = self.model, self.config
        self.optimizer = model.configure_optimizers(config)
        train_loader = DataLoader(
            self.train_dataset,
            sampler=torch.utils.data.RandomSampler(self.train_dataset, replacement=True,
                                                   num_samples=int(1e10)),
            shuffle=False, pin_memory=False, batch_size=config.batch_size,
            num_workers=config.num_workers)
        model.train()
        self.iter_num = 0
        data_iter = iter(train_loader)
        while True:
            try:
                with timed("input"):
                    batch = next(data_iter)
            except StopIteration:
                data_iter = iter(train_loader)
                with timed("input"):
                    batch = next(data_iter)
            batch = [t.to(self.device) for t in batch]
            x, y = batch
            with timed("compute"):
                logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            with timed("compute"):
                self.loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
                self.optimizer.step()
            step_done()
            self.trigger_callbacks("on_batch_end")
            self.iter_num += 1
            if config.max_iters is not None and self.iter_num >= config.max_iters:
                break


def batch_end_callback(trainer):
    if trainer.iter_num % 50 == 0:
        print(f"iter {trainer.iter_num}: train loss {trainer.loss.item():.5f}", file=sys.stderr)


dataset = CharDataset(TEXT, block_size=16)
model = GPT(dataset.vocab_size, dataset.block_size, n_layer=1, n_head=1, n_embd=8)
config = CN(batch_size=256, num_workers=0, learning_rate=5e-4, grad_norm_clip=1.0,
            max_iters=100)
trainer = Trainer(config, model, dataset)
trainer.add_callback("on_batch_end", batch_end_callback)
trainer.run()
"""

# Hugging Face's Trainer.train() (transformers/trainer.py, _inner_training_loop) with a
# DataCollatorWithPadding whose tokenizer pads Python lists on the main thread
HF_TRAINER = """
import random, sys
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from truth_timers import step_done, timed, timed_iter

torch.manual_seed(0)
torch.set_num_threads(1)
VOCAB = 1000


class Tokenizer:
    pad_token_id = 0
    unk_token_id = 1

    def pad(self, features, max_length=512):
        with timed("input"):
            longest = 0
            for f in features:
                longest = max(longest, min(len(f["input_ids"]), max_length))
            input_ids, attention_mask, labels = [], [], []
            for f in features:
                row, mask = [], []
                for token in f["input_ids"][:max_length]:
                    row.append(token if token < VOCAB else self.unk_token_id)
                    mask.append(1)
                while len(row) < longest:
                    row.append(self.pad_token_id)
                    mask.append(0)
                input_ids.append(row)
                attention_mask.append(mask)
                labels.append(f["label"])
            return {"input_ids": torch.tensor(input_ids),
                    "attention_mask": torch.tensor(attention_mask),
                    "labels": torch.tensor(labels)}


class DataCollatorWithPadding:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, features):
        return self.tokenizer.pad(features)


class TokenDataset(Dataset):
    def __init__(self, n):
        rng = random.Random(0)
        self.rows = []
        for _ in range(n):
            length = rng.randrange(64, 512)
            self.rows.append(([rng.randrange(2, VOCAB + 50) for _ in range(length)],
                              rng.randrange(2)))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids, label = self.rows[i]
        return {"input_ids": ids, "label": label}


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, input_ids, attention_mask, labels=None):
        mask = attention_mask.unsqueeze(-1).float()
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1)
        logits = self.head(pooled)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


class TrainingArguments:
    per_device_train_batch_size = 32
    gradient_accumulation_steps = 2
    num_train_epochs = 2
    learning_rate = 5e-5
    max_grad_norm = 1.0
    logging_steps = 10
    dataloader_num_workers = 0


class Trainer:
    def __init__(self, model, args, train_dataset, data_collator):
        self.model, self.args = model, args
        self.train_dataset, self.data_collator = train_dataset, data_collator
        self.log_history = []

    def get_train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size,
                          shuffle=True, collate_fn=self.data_collator,
                          num_workers=self.args.dataloader_num_workers)

    def create_optimizer_and_scheduler(self, num_training_steps):
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.args.learning_rate)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: max(0.0, 1 - step / num_training_steps))

    def _prepare_inputs(self, inputs):
        return {k: v.to("cpu") for k, v in inputs.items()}

    def compute_loss(self, model, inputs):
        outputs = model(**inputs)
        return outputs["loss"]

    def training_step(self, model, inputs):
        model.train()
        inputs = self._prepare_inputs(inputs)
        with timed("compute"):
            loss = self.compute_loss(model, inputs)
            loss = loss / self.args.gradient_accumulation_steps
            loss.backward()
        return loss.detach()

    def _maybe_log(self, tr_loss, global_step):
        loss = tr_loss.item() / self.args.logging_steps
        tr_loss -= tr_loss
        self.log_history.append({"loss": loss, "step": global_step})
        print(self.log_history[-1], file=sys.stderr)

    def train(self):
        args, model = self.args, self.model
        train_dataloader = self.get_train_dataloader()
        steps_per_epoch = len(train_dataloader) // args.gradient_accumulation_steps
        self.create_optimizer_and_scheduler(steps_per_epoch * args.num_train_epochs)
        tr_loss = torch.tensor(0.0)
        model.zero_grad()
        global_step = 0
        for epoch in range(args.num_train_epochs):
            epoch_iterator = timed_iter(train_dataloader)
            for step, inputs in enumerate(epoch_iterator):
                tr_loss_step = self.training_step(model, inputs)
                tr_loss += tr_loss_step
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    with timed("compute"):
                        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                        self.optimizer.step()
                    step_done()
                    self.lr_scheduler.step()
                    model.zero_grad()
                    global_step += 1
                    if global_step % args.logging_steps == 0:
                        self._maybe_log(tr_loss, global_step)
        return global_step


trainer = Trainer(Classifier(), TrainingArguments(), TokenDataset(2560),
                  DataCollatorWithPadding(Tokenizer()))
trainer.train()
"""

# Lightning's fit loop with automatic optimization (lightning/pytorch/loops): the closure
# runs training_step, zero_grad and backward inside optimizer.step(closure)
LIGHTNING = """
import sys
from collections import deque
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from truth_timers import step_done, timed, timed_iter

torch.manual_seed(0)
torch.set_num_threads(1)
HIDDEN = {hidden}
CLASSES = 10


class LightningModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.logged = {{}}

    def log(self, name, value, prog_bar=False):
        with timed("host"):
            self.logged[name] = value.item() if torch.is_tensor(value) else value


class Callback:
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        pass

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        pass


class LitClassifier(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(256, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                                 nn.ReLU(), nn.Linear(HIDDEN, CLASSES))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss, prog_bar=True)
        return {{"loss": loss, "preds": logits.detach().argmax(1)}}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class TQDMProgressBar(Callback):
    def __init__(self):
        self.lines = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        with timed("host"):
            metrics = []
            for name, value in module.logged.items():
                metrics.append(f"{{name}}={{value:.3f}}")
            line = f"Epoch {{trainer.current_epoch}}: {{batch_idx}} [" + ", ".join(metrics) + "]"
            self.lines += 1
            if self.lines % 50 == 0:
                print(line, file=sys.stderr)


{metrics}


class Trainer:
    def __init__(self, max_epochs, callbacks):
        self.max_epochs = max_epochs
        self.callbacks = [TQDMProgressBar(), *callbacks]
        self.current_epoch = 0

    def _call(self, hook, module, *args):
        for callback in self.callbacks:
            getattr(callback, hook)(self, module, *args)

    def fit(self, model, train_dataloaders):
        optimizer = model.configure_optimizers()
        model.train()
        for epoch in range(self.max_epochs):
            self.current_epoch = epoch
            for batch_idx, batch in enumerate(timed_iter(train_dataloaders)):
                self._call("on_train_batch_start", model, batch, batch_idx)
                result = {{}}

                def closure():
                    with timed("compute"):
                        out = model.training_step(batch, batch_idx)
                        optimizer.zero_grad()
                        out["loss"].backward()
                    result.update(out)
                    return out["loss"]

                with timed("compute"):
                    optimizer.step(closure)
                step_done()
                self._call("on_train_batch_end", model, result, batch, batch_idx)


data = TensorDataset(torch.randn({samples}, 256), torch.randint(CLASSES, ({samples},)))
trainer = Trainer(max_epochs=2, callbacks=[{callbacks}])
trainer.fit(LitClassifier(), DataLoader(data, batch_size=64, shuffle=True))
"""

# A pure-Python metric over the recent predictions, computed after every batch
METRICS = """
class ClassMetrics(Callback):
    def __init__(self):
        self.preds = deque([0] * 8192, maxlen=8192)
        self.targets = deque([0] * 8192, maxlen=8192)
        self.f1 = 0.0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        with timed("host"):
            self.preds.extend(outputs["preds"].tolist())
            self.targets.extend(batch[1].tolist())
            f1 = 0.0
            for c in range(CLASSES):
                tp = fp = fn = 0
                for p, t in zip(self.preds, self.targets):
                    if p == c:
                        if t == c:
                            tp += 1
                        else:
                            fp += 1
                    elif t == c:
                        fn += 1
                if tp:
                    f1 += 2 * tp / (2 * tp + fp + fn)
            self.f1 = f1 / CLASSES
"""

TRAINERS = {
    **{name: HEAD.format(steps=SHAPE_STEPS) + loop for name, loop in SHAPES.items()},
    # The sampler is not biased towards C calls that let go of the GIL: of a pure-Python
    # tokenizer and then a GIL-releasing torch augment, the tokenizer is named
    "pure_python_beside_torch": host_functions_trainer(250, "tokenize(6)", "augment(4)"),
    # Two pure-Python functions, 2/3 and 1/3 of the host part: the first is named with its own
    # share of step time, not the whole host part's
    "two_host_functions": host_functions_trainer(200, "tokenize(20)", "log_metrics(10)"),
    "mingpt": MINGPT,
    "hf_trainer": HF_TRAINER,
    "lightning": LIGHTNING.format(hidden=1024, samples=3200, metrics="", callbacks=""),
    "lightning_metrics": LIGHTNING.format(
        hidden=256, samples=3200, metrics=METRICS, callbacks="ClassMetrics()"),
}

# The part each trainer's slow code is in and the function it is, as the trainer is written
SLOW = {
    "nanogpt": ("host", "get_batch"),
    "fetch_at_top": ("input", "get_batch"),
    "pinned": ("input", "get_batch"),
    "slow_collate": ("input", "slow_collate"),
    "logging": ("host", "log_metrics"),
    "lbfgs": ("input", "get_batch"),
    "pure_python_beside_torch": ("host", "tokenize"),
    "two_host_functions": ("host", "tokenize"),
}
# Trainers whose slow part holds a second function of over twice AGREE_POINTS of step time:
# there the part's share is not the answer for its top function
SHARED_PART = ("two_host_functions",)
