"""The dataloader fix: its codemod and the sweep that times the DataLoader alone."""
