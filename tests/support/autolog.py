"""steer auto's log as it comes: a thread reads the process's stderr line by line (a pipe nobody
reads would fill and stop it), each line kept with the time it came, parsed as JSON where it is
(--log-format json) and kept as text where it is not (a text log, a traceback)."""
import json
import subprocess
import threading
import time


class AutoLog:
    def __init__(self, p: subprocess.Popen):
        self.events: list[dict] = []
        self._thread = threading.Thread(target=self._read, args=(p,), daemon=True)
        self._thread.start()

    def _read(self, p: subprocess.Popen) -> None:
        for line in p.stderr:
            try:
                e = json.loads(line)
                if not isinstance(e, dict):
                    raise ValueError
            except ValueError:
                e = {"msg": line.rstrip("\n")}
            e["seen"] = time.monotonic()
            self.events.append(e)

    def wait_for(self, pred, timeout: float) -> dict | None:
        """The first event PRED holds for, waiting up to TIMEOUT seconds; None if none came."""
        deadline = time.monotonic() + timeout
        while True:
            found = next((e for e in list(self.events) if pred(e)), None)
            if found or time.monotonic() >= deadline:
                return found
            time.sleep(0.2)

    def text(self) -> str:
        return "\n".join(str(e.get("msg", e)) for e in self.events)

    def join(self, timeout: float = 10) -> None:
        self._thread.join(timeout)
