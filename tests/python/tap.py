"""tap.py DIR - run the unittest tests found under DIR and print TAP.

    1..N
    ok 1 - test_binding: devices() reports the scenario's GPUs ...
    not ok 2 - test_binding: ...
    # Traceback (most recent call last):
    # ...

Exits 1 if any test failed or errored.  tests/run-all counts the ok / not ok
lines; a test's name is its module and the first line of its docstring.
"""

import sys
import traceback
import unittest


class TapResult(unittest.TestResult):
    def __init__(self, stream):
        super().__init__()
        self.stream = stream
        self.number = 0
        self.reported = False
        self.sub_errors = []

    def _name(self, test):
        doc = test.shortDescription()
        base = test.id().split(".")
        return "%s: %s" % (base[0], doc or base[-1])

    def _line(self, text):
        self.stream.write(text + "\n")
        self.stream.flush()

    def _report(self, test, ok, err=None, directive=""):
        """One TAP line per test, whatever its subtests did."""
        self.number += 1
        self.reported = True
        ok = ok and not self.sub_errors
        self._line("%s %d - %s%s" % ("ok" if ok else "not ok", self.number,
                                     self._name(test).replace("#", "\\#"), directive))
        texts = list(self.sub_errors)
        if err is not None:
            texts.append("".join(traceback.format_exception(*err))
                         if isinstance(err, tuple) else err)
        for text in texts:
            for line in text.rstrip("\n").split("\n"):
                self._line("# " + line)

    def startTest(self, test):
        super().startTest(test)
        self.reported = False
        self.sub_errors = []

    def stopTest(self, test):
        # A test whose only failures are in subtests gets no other call.
        if not self.reported:
            self._report(test, not self.sub_errors)
        super().stopTest(test)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._report(test, True)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._report(test, False, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._report(test, False, err)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.sub_errors.append("%s\n%s" % (subtest._subDescription(),
                                               "".join(traceback.format_exception(*err))))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._report(test, True, directive=" # SKIP " + reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._report(test, True, directive=" # TODO expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._report(test, False, "unexpected success")


def main(argv):
    start = argv[1] if len(argv) > 1 else "."
    suite = unittest.defaultTestLoader.discover(start, top_level_dir=start)
    print("1..%d" % suite.countTestCases(), flush=True)
    result = TapResult(sys.stdout)
    suite.run(result)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
