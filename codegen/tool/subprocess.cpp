#include "codegen/tool/subprocess.h"

#include <cerrno>
#include <csignal>
#include <stdexcept>
#include <cstring>
#include <filesystem>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace normgen {

ProcessResult run_process(const std::vector<std::string> &argv) {
    ProcessResult r;
    if (argv.empty()) return r;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        r.output = std::string("pipe: ") + std::strerror(errno);
        return r;
    }
    std::vector<char *> args;
    for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        r.output = std::string("fork: ") + std::strerror(errno);
        return r;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        execvp(args[0], args.data());
        const std::string msg = "cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
        (void)!write(2, msg.data(), msg.size());
        _exit(127);
    }
    close(fds[1]);
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        r.output.append(buf, (size_t)n);
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    return r;
}

LineProcess::LineProcess(const std::vector<std::string> &argv) : name_(argv.empty() ? "" : argv[0]) {
    int in[2], out[2];
    if (argv.empty() || pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("cannot start a helper: pipe failed");
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        throw std::runtime_error("cannot start a helper: pipe failed");
    }
    std::vector<char *> args;
    for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        signal(SIGINT, SIG_IGN);
        dup2(in[0], 0);
        dup2(out[1], 1);
        execvp(args[0], args.data());
        const std::string msg = "cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
        (void)!write(2, msg.data(), msg.size());
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    pid_ = pid;
    to_ = in[1];
    from_ = out[0];
}

LineProcess::~LineProcess() {
    if (to_ >= 0) close(to_);
    if (pid_ > 0) {
        int status = 0;
        for (int i = 0; i < 50 && waitpid(pid_, &status, WNOHANG) == 0; ++i) usleep(20000);
        if (waitpid(pid_, &status, WNOHANG) == 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, &status, 0);
        }
    }
    if (from_ >= 0) close(from_);
}

void LineProcess::send(const std::string &line) {
    std::string s = line + "\n";
    size_t done = 0;
    while (done < s.size()) {
        ssize_t n = write(to_, s.data() + done, s.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw std::runtime_error(name_ + " stopped (cannot write to it)");
        done += (size_t)n;
    }
}

std::string LineProcess::receive() {
    for (;;) {
        size_t nl = buffer_.find('\n');
        if (nl != std::string::npos) {
            std::string line = buffer_.substr(0, nl);
            buffer_.erase(0, nl + 1);
            return line;
        }
        char buf[4096];
        ssize_t n = read(from_, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw std::runtime_error(name_ + " stopped unexpectedly");
        buffer_.append(buf, (size_t)n);
    }
}

std::string sibling_tool(const std::string &name) {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const std::filesystem::path p = self.parent_path() / name;
        if (std::filesystem::exists(p, ec)) return p.string();
    }
    return name;
}

}  // namespace normgen
