"""`torchlet serve` for the specs: in-process, as a child process, and the browser that drives its page."""
