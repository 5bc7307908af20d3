"""A worker for the stop tests: STEPS steps, each recorded by rank 0 in
the file STEPS_FILE as "<restart> <step>", each reported. Rank 1 of the
first attempt asks its own runtime to stop at step STOP_AT (the SIGTERM
Nomad sends on alloc stop, drain or preemption) and waits until the
runtime has taken the request in, so the test does not depend on timing.
At the step boundary the gang agrees on, it checkpoints and exits."""

import json
import os
import signal
import sys
import time

import nomad_train as nt

STEPS = int(os.environ.get("STEPS", "6"))
STOP_AT = int(os.environ.get("STOP_AT", "2"))


def wait_for_stop_request():
    path = os.environ["NOMAD_TRAIN_EVENTS"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(path) as f:
            if any('"stop_requested"' in line for line in f):
                return
        time.sleep(0.01)
    sys.exit("the runtime never saw the stop request")


def main():
    start = 0
    ck = nt.latest_checkpoint()
    if ck:
        with open(os.path.join(ck, "state.json")) as f:
            start = json.load(f)["step"] + 1
    for step in range(start, STEPS):
        if nt.rank() == 0:
            with open(os.environ["STEPS_FILE"], "a") as f:
                f.write(f"{nt.restart_count()} {step}\n")
        if step == STOP_AT and nt.rank() == 1 and nt.restart_count() == 0:
            os.kill(os.getppid(), signal.SIGTERM)
            wait_for_stop_request()
        stop = nt.should_checkpoint()
        d = None
        if (stop or step == STEPS - 1) and nt.rank() == 0:
            d = nt.checkpoint_dir()
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
        nt.report({"step": step, "stop": stop}, checkpoint=d)
        if stop:
            return


if __name__ == "__main__":
    main()
