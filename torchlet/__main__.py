from torchlet.cli import exit_process

exit_process()
