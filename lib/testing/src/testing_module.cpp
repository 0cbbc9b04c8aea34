// placeholder so the target has a source; replaced as the module grows
