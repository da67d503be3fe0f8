/* The public header compiles alone (it is the first include) and the context-free calls work. */
#include <clattn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

static void test_version_and_strings(void **s)
{
    (void)s;
    assert_true(strlen(clattn_version()) > 0);
    for (int i = CLATTN_SUCCESS; i <= CLATTN_ERROR_IO; i++)
        assert_string_not_equal(clattn_status_string((clattn_status)i), "unknown status");
    assert_string_equal(clattn_status_string((clattn_status)999), "unknown status");
    assert_non_null(clattn_last_error(NULL));
}

static void test_destroy_null(void **s)
{
    (void)s;
    clattn_context *ctx = NULL;
    clattn_context_destroy(&ctx);
    clattn_context_destroy(NULL);
    clattn_tensor_release(NULL);
    assert_null(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_and_strings), cmocka_unit_test(test_destroy_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
