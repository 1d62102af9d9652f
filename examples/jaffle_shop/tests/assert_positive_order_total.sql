{#- Error-severity singular test: passes normally, fails when var fail_error_test is true. -#}
select *
from {{ ref('orders') }}
where amount < 0
{% if var('fail_error_test', false) %} or true {% endif %}
