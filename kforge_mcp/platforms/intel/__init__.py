"""Intel GPUs (torch's 'xpu'): unitrace's files, Intel's peaks and XMX shapes, the current device and stream."""
