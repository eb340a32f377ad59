"""Every Python example of clients/python/README.md and of docs/api.md runs against a
daemon as written."""
import os
import re
import subprocess
import sys
import tempfile
import unittest
from typing import List

import evstore

from .support import CLIENT_DIR, REPO, DaemonTestCase


def python_blocks(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return re.findall(r"^```python\n(.*?)^```$", f.read(), flags=re.S | re.M)


class DocsTests(DaemonTestCase):
    def run_python(self, code: str, *args: str) -> str:
        with tempfile.TemporaryDirectory(prefix="evstore-py-doc-") as cwd:
            script = os.path.join(cwd, "example.py")
            with open(script, "w", encoding="utf-8") as f:
                f.write(code)
            env = dict(os.environ, EVSTORE_SOCKET=self.daemon.socket_path, PYTHONPATH=CLIENT_DIR)
            result = subprocess.run([sys.executable, script, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, f"{code}\n---\n{result.stdout}")
        return result.stdout

    def test_readme_examples(self) -> None:
        blocks = python_blocks(os.path.join(CLIENT_DIR, "README.md"))
        self.assertGreaterEqual(len(blocks), 6)
        for block in blocks:
            with self.subTest(block=block.splitlines()[0]):
                self.run_python(block)

    def test_api_md_examples(self) -> None:
        """The standalone client first (DocsTests.swift runs it too), then the same with
        the package; both on the same daemon, in this order."""
        path = os.path.join(REPO, "docs", "api.md")
        if not os.path.exists(path):
            self.skipTest("docs/api.md is not there (not a checkout of the repository)")
        blocks = python_blocks(path)
        self.assertEqual(len(blocks), 2)
        with evstore.connect(self.daemon.socket_path) as db:
            before: int = db.status()["events"]  # other tests of the class may have appended
        for n, block in enumerate(blocks):
            text = self.run_python(block, self.daemon.socket_path)
            self.assertIn("job/42 is en_route at version", text)
            self.assertIn("not found: not_found", text)
            self.assertIn("first event of job/42: status", text)
            self.assertIn(f"events held: {before + n + 1}", text)


if __name__ == "__main__":
    unittest.main()
