"""Train a small text classifier on synthetic token data (a typical single-GPU script).

This is the ~9 KB script the convert-speed benchmark times `accel-convert --check` on: argparse,
a Dataset, a model, AMP with a GradScaler, gradient clipping, a warm-up scheduler stepped per batch,
an evaluation loop with accuracy, checkpoints and periodic logging -- the things real training
scripts are made of.
"""

import argparse
import math
import os
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


def parse_args():
    parser = argparse.ArgumentParser(description="Synthetic text classification")
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--num-classes", type=int, default=6)
    parser.add_argument("--train-samples", type=int, default=4096)
    parser.add_argument("--eval-samples", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--fp16", action="store_true", help="use mixed precision")
    parser.add_argument("--log-every", type=int, default=20)
    parser.add_argument("--output-dir", type=str, default="checkpoints")
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


class SyntheticTextDataset(Dataset):
    """Token sequences whose label is decided by which 'keyword' tokens they contain."""

    def __init__(self, num_samples, seq_len, vocab_size, num_classes, seed):
        generator = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(1, vocab_size, (num_samples, seq_len), generator=generator)
        keywords = torch.arange(1, num_classes + 1) * 7
        self.labels = torch.randint(0, num_classes, (num_samples,), generator=generator)
        positions = torch.randint(0, seq_len, (num_samples,), generator=generator)
        self.tokens[torch.arange(num_samples), positions] = keywords[self.labels]
        lengths = torch.randint(seq_len // 2, seq_len + 1, (num_samples,), generator=generator)
        self.mask = torch.arange(seq_len)[None, :] < lengths[:, None]
        self.mask[torch.arange(num_samples), positions] = True

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return {
            "input_ids": self.tokens[index],
            "attention_mask": self.mask[index],
            "labels": self.labels[index],
        }


class PositionalEncoding(nn.Module):
    def __init__(self, dim, max_len=512):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(max_len, dim)
        table[:, 0::2] = torch.sin(position * div_term)
        table[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("table", table)

    def forward(self, x):
        return x + self.table[: x.size(1)]


class TextClassifier(nn.Module):
    def __init__(self, vocab_size, num_classes, dim=128, heads=4, layers=2, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.position = PositionalEncoding(dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, input_ids, attention_mask):
        hidden = self.position(self.embed(input_ids))
        hidden = self.encoder(hidden, src_key_padding_mask=~attention_mask)
        weights = attention_mask.unsqueeze(-1).float()
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.head(self.norm(pooled))


def warmup_linear(optimizer, warmup_steps, total_steps):
    def factor(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train_one_epoch(model, loader, optimizer, scheduler, scaler, device, args, epoch):
    model.train()
    running_loss, seen, started = 0.0, 0, time.time()
    for step, batch in enumerate(loader):
        input_ids = batch["input_ids"].to(device)
        attention_mask = batch["attention_mask"].to(device)
        labels = batch["labels"].to(device)

        optimizer.zero_grad()
        with torch.cuda.amp.autocast(enabled=args.fp16):
            logits = model(input_ids, attention_mask)
            loss = F.cross_entropy(logits, labels)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()

        running_loss += loss.item() * labels.size(0)
        seen += labels.size(0)
        if step % args.log_every == 0:
            elapsed = time.time() - started
            print(
                f"epoch {epoch} step {step}/{len(loader)} loss {running_loss / seen:.4f} "
                f"lr {scheduler.get_last_lr()[0]:.2e} ({seen / max(elapsed, 1e-6):.0f} samples/s)"
            )
    return running_loss / max(seen, 1)


@torch.no_grad()
def evaluate(model, loader, device):
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    for batch in loader:
        input_ids = batch["input_ids"].to(device)
        attention_mask = batch["attention_mask"].to(device)
        labels = batch["labels"].to(device)
        logits = model(input_ids, attention_mask)
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        predictions = logits.argmax(dim=-1)
        correct += (predictions == labels).sum().item()
        total += labels.size(0)
    return loss_sum / total, correct / total


def save_checkpoint(model, optimizer, scheduler, epoch, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(
        {
            "epoch": epoch,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
        },
        path,
    )


def main():
    args = parse_args()
    set_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    train_set = SyntheticTextDataset(args.train_samples, args.seq_len, args.vocab_size, args.num_classes, 1)
    eval_set = SyntheticTextDataset(args.eval_samples, args.seq_len, args.vocab_size, args.num_classes, 2)
    train_loader = DataLoader(
        train_set, batch_size=args.batch_size, shuffle=True, num_workers=2, pin_memory=True, drop_last=True
    )
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size * 2, shuffle=False, num_workers=2)

    model = TextClassifier(args.vocab_size, args.num_classes).to(device)
    no_decay = ("bias", "norm")
    groups = [
        {
            "params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
            "weight_decay": args.weight_decay,
        },
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.lr)
    total_steps = args.epochs * len(train_loader)
    scheduler = warmup_linear(optimizer, args.warmup_steps, total_steps)
    scaler = torch.cuda.amp.GradScaler(enabled=args.fp16)

    best_accuracy = 0.0
    for epoch in range(args.epochs):
        train_loss = train_one_epoch(model, train_loader, optimizer, scheduler, scaler, device, args, epoch)
        eval_loss, accuracy = evaluate(model, eval_loader, device)
        print(f"epoch {epoch}: train loss {train_loss:.4f}, eval loss {eval_loss:.4f}, accuracy {accuracy:.4f}")
        if accuracy > best_accuracy:
            best_accuracy = accuracy
            save_checkpoint(model, optimizer, scheduler, epoch, os.path.join(args.output_dir, "best.pt"))
    save_checkpoint(model, optimizer, scheduler, args.epochs - 1, os.path.join(args.output_dir, "last.pt"))
    print(f"best accuracy {best_accuracy:.4f}")


if __name__ == "__main__":
    main()
