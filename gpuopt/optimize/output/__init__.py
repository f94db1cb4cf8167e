"""gpuopt optimize's output: the document, its renderings and the user's files rewritten."""
